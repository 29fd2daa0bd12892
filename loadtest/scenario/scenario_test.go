package scenario

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/helm"
)

func TestCorefiles(t *testing.T) {
	nl := nodeLocalCorefile()
	for _, want := range []string{
		"cluster.local:53 {", "in-addr.arpa:53 {", "ip6.arpa:53 {", ".:53 {",
		"success 9984 30", "denial 9984 5", "bind 169.254.20.10 10.96.0.10",
		"forward . 10.96.0.12 {\n        force_tcp", "forward . 10.0.0.3\n",
	} {
		if !strings.Contains(nl, want) {
			t.Errorf("NodeLocal Corefile lacks %q:\n%s", want, nl)
		}
	}
	z := zalandoCorefile("/k")
	for _, want := range []string{".:5300 {", "bind 127.0.0.1", "ready 127.0.0.1:8181", "prometheus 127.0.0.1:9153", "kubeconfig /k", "forward . 10.0.0.3"} {
		if !strings.Contains(z, want) {
			t.Errorf("dnsmasq+CoreDNS Corefile lacks %q:\n%s", want, z)
		}
	}
	if strings.Contains(z, CentralIP) {
		t.Errorf("node CoreDNS Corefile still names the central IP:\n%s", z)
	}
}

// TestContainerArgv checks that nodedns runs as the chart renders it:
// the rendered command with local paths for volumes only.
func TestContainerArgv(t *testing.T) {
	dir := t.TempDir()
	e := &Env{opts: Options{BinDir: "/b", OutDir: dir}, nodeKubeconfig: "/k.kubeconfig"}
	cs, err := helm.NodeContainers(nodednsValues, helm.Options{}, helm.Node{Name: "n", IP: "172.31.254.10"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		argv, err := e.containerArgv(c, dir)
		if err != nil {
			t.Fatal(err)
		}
		if argv[0] != "/b/"+c.Command[0] || len(argv) != len(c.Command) {
			t.Errorf("%s: argv %q from %q", c.Spec.Name, argv, c.Command)
		}
		for i, a := range argv[1:] {
			if a != c.Command[i+1] && !strings.Contains(a, dir) {
				t.Errorf("%s: %q became %q", c.Spec.Name, c.Command[i+1], a)
			}
		}
		switch c.Spec.Name {
		case "backend":
			i := slices.Index(argv, "-conf")
			b, err := os.ReadFile(argv[i+1])
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"kubeconfig /k.kubeconfig", "forward . " + UpstreamIP} {
				if !strings.Contains(string(b), want) {
					t.Errorf("backend Corefile lacks %q:\n%s", want, b)
				}
			}
		case "frontend":
			want := "--handover-dir=" + filepath.Join(dir, "frontend/run/nodedns")
			if !slices.Contains(argv, want) {
				t.Errorf("frontend argv %q lacks %s", argv, want)
			}
		}
	}
}

func TestMetricSum(t *testing.T) {
	text := `# HELP coredns_dns_requests_total x
coredns_dns_requests_total{server="dns://:53",type="A"} 10
coredns_dns_requests_total{server="dns://:53",type="AAAA"} 5.5
coredns_dns_requests_total_other 100
coredns_dns_requests_totals 7
`
	if got := metricSum(text, "coredns_dns_requests_total"); got != 15.5 {
		t.Errorf("sum %v, want 15.5", got)
	}
	if got := metricSum(text, "coredns_dns_requests_total", `type="A"`); got != 10 {
		t.Errorf("filtered sum %v, want 10", got)
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDesigns("nodedns,bogus"); err == nil {
		t.Error("unknown design accepted")
	}
	all, err := ParseDesigns("all")
	if err != nil || len(all) != len(Designs) {
		t.Errorf("all: %q %v", all, err)
	}
	c := DefaultConfig()
	c.Duration, c.Rounds = time.Second, 3
	if c.Validate() == nil {
		t.Error("rounds shorter than 1s accepted")
	}
}

// TestSmoke runs nodedns alone on a testbed node for a few seconds: the
// whole harness (testbed, node, chart rendering, generator in the pod,
// measurements) in about a minute. The full comparison is `make demo`.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the smoke starts a testbed")
	}
	bin, _ := filepath.Abs("../../bin")
	if r := Unavailable(bin); r != "" {
		t.Skip("scenario smoke: " + r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	e, err := StartEnv(ctx, Options{OutDir: out, BinDir: bin, Pods: 10, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	cfg := DefaultConfig()
	cfg.Designs, cfg.Rate, cfg.Duration, cfg.Rounds, cfg.Warmup, cfg.Pods = []string{"nodedns"}, 100, 3*time.Second, 1, time.Second, 10
	var log strings.Builder
	rep, err := Compare(ctx, e, cfg, &log)
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
	row := rep.Rows[0]
	if row.Error != "" || row.Load == nil {
		t.Fatalf("nodedns: %s", row.Error)
	}
	if row.Load.Answered() == 0 || row.Load.Timeouts > row.Load.Lookups/100 {
		t.Errorf("answered %d, timeouts %d of %d", row.Load.Answered(), row.Load.Timeouts, row.Load.Lookups)
	}
	if row.APITierQueries == 0 || row.NodePeakRSS == 0 {
		t.Errorf("no backend queries (%v) or no RSS (%d)", row.APITierQueries, row.NodePeakRSS)
	}
	// NOTRACK: the pods' queries create no conntrack entry; what remains
	// is the backend's upstream and API traffic.
	if row.ConntrackNew > int64(row.Load.Lookups)/10 {
		t.Errorf("%d conntrack entries for %d lookups", row.ConntrackNew, row.Load.Lookups)
	}
}
