package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/testbed"
)

var (
	memStudy      = flag.Bool("memstudy", false, "run TestMemoryStudy (backend RSS against cluster size; minutes)")
	memStudySizes = flag.String("memstudy.sizes", "0,1000,5000,10000", "cluster sizes in Services, ascending")
	memStudyEPs   = flag.Int("memstudy.endpoints", 5, "endpoints per Service (one EndpointSlice each)")
	memStudyLimit = flag.String("memstudy.gomemlimit", "128MiB", "GOMEMLIMIT of the second backend")
)

// memQPS lets the study create 10,000 Services and their slices in a couple
// of minutes against one API server on two cores.
const memQPS = 1000

// TestMemoryStudy prints the memory of two backends, one without and one
// with GOMEMLIMIT, against cluster size, after an API server restart, and
// for backends started on the full cluster. Run it with the built binary, so that the
// numbers are those of nodedns-backend and not of the test binary:
//
//	make build && NODEDNS_BACKEND_BIN=$PWD/bin/nodedns-backend \
//	  go test ./backend -run TestMemoryStudy -memstudy -v -timeout 60m
func TestMemoryStudy(t *testing.T) {
	if !*memStudy {
		t.Skip("memory study: pass -memstudy")
	}
	var sizes []int
	for _, s := range strings.Split(*memStudySizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("-memstudy.sizes: %v", err)
		}
		sizes = append(sizes, n)
	}
	if os.Getenv("NODEDNS_BACKEND_BIN") == "" {
		t.Log("NODEDNS_BACKEND_BIN unset: measuring the test binary acting as the backend (a few MB more text)")
	}
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	cfg := tb.RestConfig()
	cfg.QPS, cfg.Burst = memQPS, 2*memQPS
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "mem"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two backends watch the same cluster: one as the Go runtime leaves it,
	// one with the soft memory limit the chart would set.
	variants := []struct {
		name string
		env  []string
		b    *backend
	}{
		{name: "no GOMEMLIMIT"},
		{name: "GOMEMLIMIT=" + *memStudyLimit, env: []string{"GOMEMLIMIT=" + *memStudyLimit}},
	}
	for i := range variants {
		variants[i].b = startClusterBackend(t, tb, variants[i].env...)
	}

	type row struct {
		label, variant string
		services, eps  int
		rss, hwm, anon float64 // MiB
		heap           float64 // MiB
		formula, took  string
	}
	var rows []row
	measure := func(label string, services int, took time.Duration, settle time.Duration) {
		time.Sleep(settle)
		for _, v := range variants {
			rss, hwm, anon := procMemory(t, v.b.proc.Cmd.Process.Pid)
			_, text, err := httpGet("http://" + v.b.Metrics + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			heapStr, _ := metricValue(text, "go_memstats_heap_inuse_bytes")
			heap, _ := strconv.ParseFloat(heapStr, 64)
			eps := services * *memStudyEPs
			r := row{
				label: label, variant: v.name, services: services, eps: eps,
				rss: rss, hwm: hwm, anon: anon, heap: heap / (1 << 20),
				formula: fmt.Sprintf("%.0f / %.0f", float64(services)/1000+54, float64(services+eps)/1000+54),
				took:    took.Round(time.Second).String(),
			}
			rows = append(rows, r)
			t.Logf("%s, %s: services=%d endpoints=%d rss=%.1fMiB hwm=%.1fMiB anon=%.1fMiB heap_inuse=%.1fMiB (took %s)",
				label, v.name, services, eps, rss, hwm, anon, r.heap, r.took)
		}
	}
	waitAll := func(i int) {
		for _, v := range variants {
			waitForEndpoint(t, v.b.DNS, i, *memStudyEPs, ns)
		}
	}

	have := 0
	for _, n := range sizes {
		start := time.Now()
		if err := testbed.CreateServices(ctx, client, ns, have, n, *memStudyEPs); err != nil {
			t.Fatalf("create services %d..%d: %v", have, n, err)
		}
		if n > 0 {
			waitAll(n - 1)
		}
		have = n
		measure(fmt.Sprintf("%d Services", n), n, time.Since(start), 10*time.Second)
	}

	// After an API server restart the informers list everything again
	// while the old objects are still referenced.
	before := apiserverLists(ctx, t, tb)
	start := time.Now()
	if err := tb.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	// A Service created after the restart shows that the watches resumed.
	if err := testbed.CreateServices(ctx, client, ns, have, have+1, *memStudyEPs); err != nil {
		t.Fatal(err)
	}
	have++
	waitAll(have - 1)
	measure("after API server restart, +10s", have, time.Since(start), 10*time.Second)
	after := apiserverLists(ctx, t, tb)
	t.Logf("LIST requests for services/endpointslices/namespaces (all clients): before restart %s; after restart (counters reset) %s", before, after)
	// The runtime forces a GC at least every 2 minutes and the scavenger
	// returns freed pages to the OS over time.
	measure("after API server restart, +2.5m", have, time.Since(start), 140*time.Second)

	// Backends that start now list everything at once, as a restarted pod
	// does: their peak is what the memory limit must allow.
	start = time.Now()
	for i := range variants {
		variants[i].b.stop()
		variants[i].b = startClusterBackend(t, tb, variants[i].env...)
	}
	waitAll(have - 1)
	measure("fresh start on the full cluster", have, time.Since(start), 10*time.Second)

	var out strings.Builder
	fmt.Fprintf(&out, "\n| state | backend | Services | endpoints | RSS MiB | anon RSS MiB | peak RSS MiB | Go heap in use MiB | formula MB (svc / svc+eps) | took |\n")
	fmt.Fprintf(&out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %s | %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |\n",
			r.label, r.variant, r.services, r.eps, r.rss, r.anon, r.hwm, r.heap, r.formula, r.took)
	}
	t.Log(out.String())
	fmt.Print(out.String())
}

// waitForEndpoint waits until the backend answers the PTR of the last
// endpoint of Service svc-<i>, which the kubernetes plugin knows only once
// both the Service and its slice arrived.
func waitForEndpoint(t testing.TB, addr string, i, eps int, ns string) {
	t.Helper()
	rev, _ := dns.ReverseAddr(testbed.ServiceEndpointIP(i, eps-1, eps).String())
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
		r, _, err := c.Exchange(dnstest.Query(rev, dns.TypePTR), addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 &&
			strings.Contains(r.Answer[0].String(), fmt.Sprintf("svc-%d.%s.svc.cluster.local.", i, ns)) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("backend does not know svc-%d's endpoints after 5m", i)
}

// procMemory returns VmRSS, VmHWM (peak RSS) and RssAnon (RSS less the
// binary's and libraries' file pages) of pid in MiB.
func procMemory(t testing.TB, pid int) (rss, hwm, anon float64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return rss, hwm, anon
}

// apiserverLists sums kube-apiserver's LIST request counters for the
// resources the kubernetes plugin watches.
func apiserverLists(ctx context.Context, t testing.TB, tb *testbed.Testbed) string {
	t.Helper()
	data, err := tb.Metrics(ctx)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `verb="LIST"`) {
			continue
		}
		for _, res := range []string{"services", "endpointslices", "namespaces"} {
			if strings.Contains(line, `resource="`+res+`"`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				counts[res] += v
			}
		}
	}
	return fmt.Sprintf("services=%.0f endpointslices=%.0f namespaces=%.0f", counts["services"], counts["endpointslices"], counts["namespaces"])
}
