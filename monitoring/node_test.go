package monitoring

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/shared/netnstest"
	"github.com/nodedns/nodedns/shared/proctest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds nodedns-frontend and nodedns-backend once per test run,
// as `make build` does, and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "nodedns-monitoring-")
		if buildErr != nil {
			return
		}
		for _, name := range []string{"frontend", "backend"} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, "nodedns-"+name), "github.com/nodedns/nodedns/"+name)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", name, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// dialer returns a DialContext that opens connections inside netns.
func dialer(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = netnstest.Namespace{Name: netns}.Do(func() error {
			d := net.Dialer{Timeout: 3 * time.Second}
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// httpClient sends requests from inside netns.
func httpClient(netns string) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: dialer(netns), DisableKeepAlives: true},
	}
}

// get returns the status and body of a GET of url from inside netns.
func get(ctx context.Context, netns, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := httpClient(netns).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// query asks server (UDP) from inside netns.
func query(ctx context.Context, netns, server, name string, qtype uint16) (*dns.Msg, error) {
	c, err := dialer(netns)(ctx, "udp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	conn := &dns.Conn{Conn: c}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := conn.WriteMsg(m); err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	in, err := conn.ReadMsg()
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", name, err)
	}
	return in, nil
}

// Names the upstream answers.
const (
	upstreamAddr = "127.0.0.53" // in the node namespace: the node's resolver
	externalName = "www.example.com."
	externalIP   = "192.0.2.80"
	brokenName   = "broken.example.com." // SERVFAIL
)

// startUpstream serves, inside netns on upstreamAddr:53 (UDP and TCP), the
// resolvers outside the cluster: externalName, SERVFAIL for brokenName,
// NXDOMAIN for the rest.
func startUpstream(t *testing.T, netns string) {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	err := netnstest.Namespace{Name: netns}.Do(func() (err error) {
		if pc, err = net.ListenPacket("udp", upstreamAddr+":53"); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", upstreamAddr+":53")
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		t.Fatalf("upstream in %s: %v", netns, err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case strings.EqualFold(q.Name, brokenName):
			m.Rcode = dns.RcodeServerFailure
		case strings.EqualFold(q.Name, externalName) && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP(externalIP)}}
		case strings.EqualFold(q.Name, externalName):
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
}

// container is a rendered container made runnable in a node namespace.
type container struct {
	name string
	argv []string
	env  []string
}

// runnable turns c into a command line here: the binary from bins, the
// Corefile written under dir (with kubeconfig for the kubernetes plugin,
// standing for the in-cluster ServiceAccount), and what override names
// replaced: a "--flag" key, that flag's value on the command line (the
// frontend's settings); a variable, its value in the environment (the
// backend reads its Corefile's variables at run time) and in
// --flag=$(VAR) arguments, which kubelet expanded from the variable.
func runnable(c helm.Container, corefile, kubeconfig, bins, dir string, override map[string]string) (container, error) {
	out := container{name: c.Spec.Name, argv: []string{filepath.Join(bins, c.Command[0])}}
	used := map[string]bool{}
	// c.Command is spec with each element expanded.
	spec := append(append([]string{}, c.Spec.Command...), c.Spec.Args...)
	for i, a := range c.Command[1:] {
		for k, v := range override {
			// A key "--flag" overrides the flag's value as written in the
			// pod template; a variable, the flag that refers to it.
			if strings.HasPrefix(k, "--") {
				if strings.HasPrefix(a, k+"=") {
					a, used[k] = k+"="+v, true
				}
			} else if flag, ok := strings.CutSuffix(spec[i+1], "=$("+k+")"); ok {
				a, used[k] = flag+"="+v, true
			}
		}
		if a == "/etc/nodedns/Corefile" {
			const kube = "kubernetes {$NODEDNS_CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {"
			if !strings.Contains(corefile, kube) {
				return container{}, fmt.Errorf("no kubernetes block in the Corefile:\n%s", corefile)
			}
			file := filepath.Join(dir, "Corefile")
			data := strings.Replace(corefile, kube, kube+"\n            kubeconfig "+kubeconfig, 1)
			if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
				return container{}, err
			}
			a = file
		}
		out.argv = append(out.argv, a)
	}
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := override[k]; ok {
			kv, used[k] = k+"="+v, true
		}
		out.env = append(out.env, kv)
	}
	for k := range override {
		if !used[k] {
			return container{}, fmt.Errorf("%s has no flag or variable %s to override", c.Spec.Name, k)
		}
	}
	return out, nil
}

// start runs c inside netns until the test ends.
func (c container) start(t *testing.T, netns, name string) *proctest.Process {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, c.argv...)...)
	// The image's PATH (the frontend runs iptables).
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.env...)
	return proctest.Start(t, name, cmd)
}

// waitFor polls cond every 200ms until it returns nil, p exits, or
// timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, p *proctest.Process, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if p != nil {
			select {
			case <-p.Done():
				t.Fatalf("%s: the process exited (%v) while waiting; last: %v", what, p.Err(), err)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
