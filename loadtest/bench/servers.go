package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// serverEnv is what a server's command line is made from.
type serverEnv struct {
	dir     string // output dir, for config files
	port    int    // DNS port on 127.0.0.1, UDP and TCP
	backend string // the fake backend, host:port
	// backendHost and backendPort split backend for configs that want them apart.
	backendHost, backendPort string
	readyURL                 string // the fake backend's readiness URL
	metrics                  string // frontend metrics address
	health                   string // frontend health address
	cfg                      Config
}

// serverArgv returns the command line of server name, writing its config
// file into env.dir first where it needs one.
func serverArgv(name string, env serverEnv) ([]string, error) {
	switch name {
	case Frontend, Baseline:
		bin := env.cfg.FrontendBin
		if name == Baseline {
			bin = env.cfg.BaselineBin
		}
		return []string{bin,
			"--setup-network=false",
			"--listen=127.0.0.1:" + strconv.Itoa(env.port),
			"--backend=" + env.backend,
			"--backend-ready-url=" + env.readyURL,
			"--metrics=" + env.metrics,
			"--health=" + env.health,
		}, nil
	case Unbound:
		path := filepath.Join(env.dir, "unbound.conf")
		if err := os.WriteFile(path, []byte(unboundConf(env)), 0o644); err != nil {
			return nil, fmt.Errorf("write unbound config: %w", err)
		}
		return []string{"unbound", "-d", "-c", path}, nil
	case Dnsmasq:
		return []string{"dnsmasq",
			"--no-daemon", // foreground, no fork per TCP connection, no user change
			"--conf-file=/dev/null",
			"--no-resolv",
			"--no-hosts",
			"--pid-file=",
			"--server=" + env.backendHost + "#" + env.backendPort,
			"--cache-size=10000",
			"--dns-forward-max=1000",
			"--port=" + strconv.Itoa(env.port),
			"--listen-address=127.0.0.1",
			"--bind-interfaces",
		}, nil
	case NodeLocal:
		path := filepath.Join(env.dir, "Corefile.nodelocal")
		if err := os.WriteFile(path, []byte(nodeLocalCorefile(env)), 0o644); err != nil {
			return nil, fmt.Errorf("write Corefile: %w", err)
		}
		return []string{env.cfg.CoreDNSBin, "-conf", path}, nil
	}
	return nil, fmt.Errorf("unknown server %q", name)
}

// unboundConf is a caching forwarder: one thread, iterator only (no
// validator), everything forwarded to the backend over TCP, caches far
// larger than the query set, no prefetch so hits stay hits.
func unboundConf(env serverEnv) string {
	return fmt.Sprintf(`server:
	interface: 127.0.0.1@%[1]d
	port: %[1]d
	do-ip6: no
	do-daemonize: no
	chroot: ""
	username: ""
	directory: "%[2]s"
	pidfile: ""
	use-syslog: no
	logfile: ""
	verbosity: 0
	num-threads: 1
	module-config: "iterator"
	tcp-upstream: yes
	do-not-query-localhost: no
	access-control: 127.0.0.0/8 allow
	msg-cache-size: 64m
	rrset-cache-size: 128m
	num-queries-per-thread: 1024
	so-rcvbuf: 4m
	prefetch: no
	qname-minimisation: no
	minimal-responses: yes
	statistics-interval: 0
	extended-statistics: no

remote-control:
	control-enable: no

forward-zone:
	name: "."
	forward-addr: %[3]s@%[4]s
`, env.port, env.dir, env.backendHost, env.backendPort)
}

// nodeLocalCorefile is the cache and forward part of NodeLocal DNSCache's
// Corefile (k8s.io/dns cmd/node-cache, cluster.local block), answering
// every zone.
func nodeLocalCorefile(env serverEnv) string {
	return fmt.Sprintf(`.:%d {
    bind 127.0.0.1
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    forward . %s {
        force_tcp
    }
}
`, env.port, env.backend)
}
