package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/testbed"
)

var (
	memStudy      = flag.Bool("memstudy", false, "run TestMemoryStudy (backend RSS against cluster size; minutes)")
	memStudySizes = flag.String("memstudy.sizes", "0,1000,5000,10000", "cluster sizes in Services, ascending")
	memStudyEPs   = flag.Int("memstudy.endpoints", 5, "endpoints per Service (one EndpointSlice each)")
)

// memWorkers and memQPS let the study create 10,000 Services and their
// slices in a couple of minutes against one API server on two cores.
const (
	memWorkers = 16
	memQPS     = 1000
)

// TestMemoryStudy prints the backend's memory against cluster size, then
// after an API server restart. Run it with the built binary, so that the
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
	b := startClusterBackend(t, tb)
	pid := b.cmd.Process.Pid

	type row struct {
		label          string
		services, eps  int
		rss, hwm, heap float64 // MiB
		formula, took  string
	}
	var rows []row
	measure := func(label string, services int, took time.Duration) {
		time.Sleep(10 * time.Second) // let the informers settle and a GC cycle run
		rss, hwm := procMemory(t, pid)
		_, text, err := httpGet("http://" + b.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		heapStr, _ := metricValue(text, "go_memstats_heap_inuse_bytes")
		heap, _ := strconv.ParseFloat(heapStr, 64)
		eps := services * *memStudyEPs
		r := row{
			label: label, services: services, eps: eps,
			rss: rss, hwm: hwm, heap: heap / (1 << 20),
			formula: fmt.Sprintf("%.0f / %.0f", float64(services)/1000+54, float64(services+eps)/1000+54),
			took:    took.Round(time.Second).String(),
		}
		rows = append(rows, r)
		t.Logf("%s: services=%d endpoints=%d rss=%.1fMiB hwm=%.1fMiB heap_inuse=%.1fMiB (took %s)", label, services, eps, rss, hwm, r.heap, r.took)
	}

	have := 0
	for _, n := range sizes {
		start := time.Now()
		if err := createServices(ctx, client, ns, have, n, *memStudyEPs); err != nil {
			t.Fatalf("create services %d..%d: %v", have, n, err)
		}
		if n > 0 {
			waitForEndpoint(t, b.DNS, n-1, *memStudyEPs, ns)
		}
		have = n
		measure(fmt.Sprintf("%d Services", n), n, time.Since(start))
	}

	before := apiserverLists(ctx, t, tb)
	start := time.Now()
	if err := tb.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	// A Service created after the restart shows that the watches resumed.
	if err := createServices(ctx, client, ns, have, have+1, *memStudyEPs); err != nil {
		t.Fatal(err)
	}
	waitForEndpoint(t, b.DNS, have, *memStudyEPs, ns)
	measure("after API server restart", have+1, time.Since(start))
	after := apiserverLists(ctx, t, tb)
	t.Logf("LIST requests for services/endpointslices/namespaces: before restart %s, after restart (counter reset) %s", before, after)

	var out strings.Builder
	fmt.Fprintf(&out, "\n| state | Services | endpoints | RSS MiB | peak RSS MiB | Go heap in use MiB | formula MB (svc / svc+eps) | took |\n")
	fmt.Fprintf(&out, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %s | %d | %d | %.1f | %.1f | %.1f | %s | %s |\n", r.label, r.services, r.eps, r.rss, r.hwm, r.heap, r.formula, r.took)
	}
	t.Log(out.String())
	fmt.Print(out.String())
}

// createServices creates Services svc-<from>..svc-<to-1> in ns, each a
// ClusterIP Service with one EndpointSlice of eps ready endpoints.
func createServices(ctx context.Context, c kubernetes.Interface, ns string, from, to, eps int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(memWorkers)
	for i := from; i < to; i++ {
		g.Go(func() error {
			name := fmt.Sprintf("svc-%d", i)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
			}
			if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create service %s: %w", name, err)
			}
			var endpoints []discoveryv1.Endpoint
			for j := range eps {
				endpoints = append(endpoints, ep(endpointIP(i, j, eps).String(), "", true))
			}
			slice := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name:      name + "-1",
					Namespace: ns,
					Labels:    map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "nodedns-test"},
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   endpoints,
				Ports:       []discoveryv1.EndpointPort{port("http", 8080, corev1.ProtocolTCP)},
			}
			if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create endpointslice %s: %w", slice.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// endpointIP numbers endpoints from 10.128.0.0 up.
func endpointIP(service, j, eps int) netip.Addr {
	n := uint32(10<<24|128<<16) + uint32(service*eps+j)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// waitForEndpoint waits until the backend answers the PTR of the last
// endpoint of Service svc-<i>, which the kubernetes plugin knows only once
// both the Service and its slice arrived.
func waitForEndpoint(t testing.TB, addr string, i, eps int, ns string) {
	t.Helper()
	rev, _ := dns.ReverseAddr(endpointIP(i, eps-1, eps).String())
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

// procMemory returns VmRSS and VmHWM (peak RSS) of pid in MiB.
func procMemory(t testing.TB, pid int) (rss, hwm float64) {
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
		}
	}
	return rss, hwm
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
