package server

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	zapobs "go.uber.org/zap/zaptest/observer"
)

// rcodeHandler answers from ServeFast with the rcode the first label
// names (nx: NXDOMAIN, sf: SERVFAIL, ref: REFUSED, anything else but
// miss: NOERROR); miss* goes to ServeSlow, which records the client it
// is told (ServeSlowFrom) and answers NOERROR.
type rcodeHandler struct {
	mu      sync.Mutex
	clients []netip.Addr
}

func (h *rcodeHandler) ServeFast(dst, req []byte, _ Proto) ([]byte, bool) {
	resp := answer(dst, req)
	switch firstLabel(req) {
	case "miss":
		return nil, false
	case "nx":
		resp[3] = resp[3]&0xf0 | dns.RcodeNameError
	case "sf":
		resp[3] = resp[3]&0xf0 | dns.RcodeServerFailure
	case "ref":
		resp[3] = resp[3]&0xf0 | dns.RcodeRefused
	}
	return resp, true
}

func (h *rcodeHandler) ServeSlow(ctx context.Context, dst, req []byte, p Proto) []byte {
	return h.ServeSlowFrom(ctx, dst, req, p, netip.Addr{})
}

func (h *rcodeHandler) ServeSlowFrom(_ context.Context, dst, req []byte, _ Proto, client netip.Addr) []byte {
	h.mu.Lock()
	h.clients = append(h.clients, client)
	h.mu.Unlock()
	return answer(dst, req)
}

func (h *rcodeHandler) Overloaded(dst, req []byte, _ Proto) []byte { return servfail(dst, req) }

// startObserved starts a server with cfg whose query log is recorded.
func startObserved(t *testing.T, cfg Config, h Handler) (*Server, *zapobs.ObservedLogs) {
	t.Helper()
	core, logs := zapobs.New(zap.InfoLevel)
	cfg.QueryLogger = zap.New(core)
	s, _ := startServer(t, cfg, h)
	return s, logs
}

// askFrom sends a query for name from the loopback address src.
func askFrom(t *testing.T, network, src, addr, name string) *dns.Msg {
	t.Helper()
	var local net.Addr = &net.UDPAddr{IP: net.ParseIP(src)}
	if network == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local}}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s from %s: %v", network, name, src, err)
	}
	return r
}

func TestTopTalkersCounts(t *testing.T) {
	h := &rcodeHandler{}
	s, _ := startObserved(t, Config{TopTalkers: 10}, h)
	addr := s.Addrs()[0]
	for range 3 {
		askFrom(t, "udp", "127.0.0.2", addr, "nx.example")
	}
	askFrom(t, "udp", "127.0.0.2", addr, "sf.example")
	askFrom(t, "tcp", "127.0.0.2", addr, "ref.example")
	askFrom(t, "udp", "127.0.0.2", addr, "miss.example")
	askFrom(t, "udp", "127.0.0.3", addr, "ok.example")
	top, err := s.TopTalkers(0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Talker{
		{Addr: "127.0.0.2", Queries: 6, NXDomain: 3, Servfail: 1, Refused: 1},
		{Addr: "127.0.0.3", Queries: 1},
	}
	if len(top.Talkers) != len(want) {
		t.Fatalf("talkers %+v, want %+v", top.Talkers, want)
	}
	for i := range want {
		if top.Talkers[i] != want[i] {
			t.Errorf("talker %d: %+v, want %+v", i, top.Talkers[i], want[i])
		}
	}
	if top.WindowSeconds != 60 || top.MaxSources != 10 {
		t.Errorf("window %ds, max %d", top.WindowSeconds, top.MaxSources)
	}
	// The miss was resolved for its client: the handler was told it.
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) != 1 || h.clients[0] != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("ServeSlowFrom was told %v, want [127.0.0.2]", h.clients)
	}
}

// TestTopTalkersBounded: past TopTalkers sources per socket, new ones are
// counted together as "other", and the sources tracked stay bounded.
func TestTopTalkersBounded(t *testing.T) {
	s, _ := startObserved(t, Config{TopTalkers: 2, UDPSockets: 1}, &rcodeHandler{})
	addr := s.Addrs()[0]
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.4"} {
		askFrom(t, "udp", src, addr, "nx.example")
	}
	top, err := s.TopTalkers(0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, tk := range top.Talkers {
		got[tk.Addr] = tk.NXDomain
	}
	if len(got) != 3 || got["127.0.0.2"] != 1 || got["127.0.0.3"] != 1 || got["other"] != 3 {
		t.Errorf("talkers %+v, want 127.0.0.2 and .3 once each, other 3", top.Talkers)
	}
	if n := len(s.udp[0].talk.m); n != 2 {
		t.Errorf("%d sources tracked, want 2", n)
	}
}

// TestTalkerWindow: counts older than the window are not reported, and a
// source silent for a whole window makes room for a new one.
func TestTalkerWindow(t *testing.T) {
	tk := &talkers{max: 1, m: map[srcKey]*talker{}}
	a, b := v4Key([4]byte{10, 0, 0, 1}), v4Key([4]byte{10, 0, 0, 2})
	nx := []byte{0, 0, 0x81, 0x83, 0, 0, 0, 0, 0, 0, 0, 0}
	tk.add(100, a, nx, answerHit)
	tk.add(103, a, nx, answerHit)
	var n [numCounts]uint64
	tk.m[a].sum(103, &n)
	if n[countQueries] != 2 || n[countNXDomain] != 2 {
		t.Errorf("within the window: %v", n)
	}
	n = [numCounts]uint64{}
	tk.m[a].sum(104, &n)
	if n[countQueries] != 1 {
		t.Errorf("slot 100 is out of the window at 104: %v", n)
	}
	tk.add(107, b, nx, answerOverload) // a's last slot (103) is out: swept
	if _, ok := tk.m[a]; ok || tk.m[b] == nil {
		t.Errorf("after a silent window: tracked %v", tk.m)
	}
	n = [numCounts]uint64{}
	tk.m[b].sum(107, &n)
	if n[countOverloaded] != 1 {
		t.Errorf("overloaded not counted: %v", n)
	}
}

func TestTopTalkersOff(t *testing.T) {
	s, _ := startObserved(t, Config{}, &rcodeHandler{})
	if s.obs != nil {
		t.Error("observer set with both the query log and the top talkers off")
	}
	if _, err := s.TopTalkers(0); err != ErrNoTalkers {
		t.Errorf("TopTalkers: %v, want ErrNoTalkers", err)
	}
}

func TestQueryLog(t *testing.T) {
	ql, err := ParseQueryLog("Example.,svc.cluster.local", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, logs := startObserved(t, Config{QueryLog: ql}, &rcodeHandler{})
	addr := s.Addrs()[0]
	askFrom(t, "udp", "127.0.0.2", addr, "nx.example")
	askFrom(t, "udp", "127.0.0.3", addr, "ok.other")
	askFrom(t, "tcp", "127.0.0.4", addr, "miss.a.svc.cluster.local")
	// The miss is logged once answered, after its answer is written.
	deadline := time.Now().Add(2 * time.Second)
	for logs.FilterMessage("query").Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	entries := logs.FilterMessage("query").All()
	if len(entries) != 2 {
		t.Fatalf("%d query log lines, want 2 (ok.other is outside the zones): %v", len(entries), entries)
	}
	byName := map[string]map[string]any{}
	for _, e := range entries {
		f := e.ContextMap()
		byName[f["name"].(string)] = f
		if _, ok := f["latency"].(time.Duration); !ok {
			t.Errorf("%v: no latency", f)
		}
	}
	for name, want := range map[string]map[string]string{
		"nx.example.":               {"client": "127.0.0.2", "proto": "udp", "type": "A", "rcode": "NXDOMAIN", "answer": "hit"},
		"miss.a.svc.cluster.local.": {"client": "127.0.0.4", "proto": "tcp", "type": "A", "rcode": "NOERROR", "answer": "miss"},
	} {
		f := byName[name]
		if f == nil {
			t.Errorf("%s not logged: %v", name, entries)
			continue
		}
		for k, v := range want {
			if f[k] != v {
				t.Errorf("%s: %s=%v, want %s", name, k, f[k], v)
			}
		}
	}
}

// TestQueryLogSampled: about the fraction asked for is logged.
func TestQueryLogSampled(t *testing.T) {
	ql, err := ParseQueryLog(".", 0.25)
	if err != nil {
		t.Fatal(err)
	}
	s, logs := startObserved(t, Config{QueryLog: ql}, &rcodeHandler{})
	addr := s.Addrs()[0]
	const n = 400
	for range n {
		askFrom(t, "udp", "127.0.0.2", addr, "ok.example")
	}
	// Binomial(400, 0.25): mean 100, standard deviation 8.7; 50 and 150
	// are more than 5 deviations away.
	if got := logs.FilterMessage("query").Len(); got < 50 || got > 150 {
		t.Errorf("%d of %d logged at 0.25", got, n)
	}
}

func TestParseQueryLog(t *testing.T) {
	for _, tc := range []struct {
		zones  string
		sample float64
		want   []string
		ok     bool
	}{
		{"", 0.01, nil, true},
		{".", 1, []string{"."}, true},
		{"Example.COM, cluster.local.", 0.5, []string{"example.com.", "cluster.local."}, true},
		{"example.com", 0, nil, false},
		{"example.com", 1.5, nil, false},
		{"bad..name", 0.1, nil, false},
	} {
		q, err := ParseQueryLog(tc.zones, tc.sample)
		if (err == nil) != tc.ok {
			t.Errorf("%q %v: %v, want ok %v", tc.zones, tc.sample, err, tc.ok)
			continue
		}
		if tc.ok && len(q.Zones) != len(tc.want) {
			t.Errorf("%q: zones %q, want %q", tc.zones, q.Zones, tc.want)
		}
		for i := range tc.want {
			if tc.ok && q.Zones[i] != tc.want[i] {
				t.Errorf("%q: zones %q, want %q", tc.zones, q.Zones, tc.want)
			}
		}
	}
}
