package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// defaultEtcd is where Debian's etcd-server package installs etcd.
const defaultEtcd = "/usr/bin/etcd"

// EtcdPath returns the etcd binary: $NODEDNS_ETCD, else /usr/bin/etcd, else
// etcd from PATH. The error says how to install it.
func EtcdPath() (string, error) {
	if p := os.Getenv("NODEDNS_ETCD"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("NODEDNS_ETCD=%s is not an executable file", p)
		}
		return p, nil
	}
	if isExecutable(defaultEtcd) {
		return defaultEtcd, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", errors.New("etcd not found at " + defaultEtcd + " or in PATH: install it with `apt-get install etcd-server` (or set NODEDNS_ETCD)")
}

// startEtcd starts a single-member etcd on loopback and waits until it is
// healthy. It returns the client URL.
func (tb *Testbed) startEtcd(ctx context.Context, etcdPath string) (string, error) {
	// tmpfs makes etcd's fsyncs free: the data lives only as long as the
	// testbed, and fsync latency on a shared disk slows every write.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "nodedns-etcd-")
	if err != nil {
		return "", fmt.Errorf("create etcd data directory: %w", err)
	}
	tb.etcdData = dir

	loop := net.IPv4(127, 0, 0, 1)
	clientPort, err := freePort(loop)
	if err != nil {
		return "", err
	}
	peerPort, err := freePort(loop)
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := StartProcess(tb.Dir, "etcd", []string{
		etcdPath,
		"--name=testbed",
		"--data-dir=" + dir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testbed=" + peerURL,
		"--initial-cluster-state=new",
		"--logger=zap",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return "", err
	}
	tb.mu.Lock()
	tb.etcd = p
	tb.mu.Unlock()

	hc := &http.Client{Timeout: 2 * time.Second}
	healthy := func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`), nil
	}
	if err := poll(ctx, p, "etcd /health", healthy); err != nil {
		return "", fmt.Errorf("%w\n%s", err, p.LogTail())
	}
	return clientURL, nil
}
