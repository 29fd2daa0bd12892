package cache

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

func TestHitPatchesCopy(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	first := req(t, "www.example.com.", dns.TypeA, nil)
	resp := answer(t, first, dns.RcodeSuccess, rrs(t,
		"www.example.com. 300 IN CNAME web.example.com.",
		"web.example.com. 120 IN A 192.0.2.1"), nil)
	before := resp.Copy()
	if _, err := c.Set(parse(t, first).Key(), resp); err != nil {
		t.Fatal(err)
	}
	if resp.String() != before.String() {
		t.Fatal("Set modified the backend's message")
	}
	clk.Advance(100 * time.Second)

	tests := []struct {
		name    string
		id      uint16
		qname   string
		rd, cd  bool
		wantTTL []uint32
	}{
		{"aged, case restored", 0xabcd, "WwW.ExAmPlE.cOm.", true, false, []uint32{200, 20}},
		{"another ID and case, RD clear", 7, "www.EXAMPLE.com.", false, false, []uint32{200, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := req(t, tt.qname, dns.TypeA, func(m *dns.Msg) { m.Id, m.RecursionDesired = tt.id, tt.rd })
			out, res := c.Get(buf(), parse(t, b), 512)
			if !res.Hit || res.Kind != Success {
				t.Fatalf("result %+v", res)
			}
			m := unpack(t, out)
			if m.Id != tt.id || !m.Response || m.RecursionDesired != tt.rd || !m.RecursionAvailable || m.Truncated {
				t.Errorf("header %+v", m.MsgHdr)
			}
			if m.Question[0].Name != tt.qname {
				t.Errorf("question %q, want %q", m.Question[0].Name, tt.qname)
			}
			// The CNAME owner is compressed to the question and follows its case.
			if m.Answer[0].Header().Name != tt.qname {
				t.Errorf("answer owner %q, want %q", m.Answer[0].Header().Name, tt.qname)
			}
			if got := ttls(m); !slices.Equal(got, tt.wantTTL) {
				t.Errorf("TTLs %v, want %v", got, tt.wantTTL)
			}
			if m.IsEdns0() != nil {
				t.Error("OPT in the answer to a query without one")
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		clk.Advance(20 * time.Second)
		if _, res := c.Get(buf(), parse(t, first), 512); res.Hit {
			t.Error("hit after the smallest TTL ran out")
		}
	})
}

func TestEDNSAndTruncation(t *testing.T) {
	c := newCache(t, DefaultConfig(), newClock())
	base := req(t, "big.example.", dns.TypeA, nil)
	var as []string
	for i := range 40 { // 40 × 16 bytes with compression: over 512, under 1232
		as = append(as, fmt.Sprintf("big.example. 60 IN A 192.0.2.%d", i))
	}
	if _, err := c.Set(parse(t, base).Key(), answer(t, base, dns.RcodeSuccess, rrs(t, as...), nil)); err != nil {
		t.Fatal(err)
	}
	doKey := req(t, "big.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(4096, true) })
	if _, err := c.Set(parse(t, doKey).Key(), answer(t, doKey, dns.RcodeSuccess, rrs(t, as...), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		edit    func(*dns.Msg)
		tcp     bool
		wantTC  bool
		wantOPT bool
		wantDO  bool
	}{
		{"no EDNS over UDP: 512", nil, false, true, false, false},
		{"no EDNS over TCP", nil, true, false, false, false},
		{"EDNS 4096", func(m *dns.Msg) { m.SetEdns0(4096, false) }, false, false, true, false},
		{"EDNS 600", func(m *dns.Msg) { m.SetEdns0(600, false) }, false, true, true, false},
		{"EDNS DO echoed", func(m *dns.Msg) { m.SetEdns0(4096, true) }, false, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := parse(t, req(t, "big.example.", dns.TypeA, tt.edit))
			out, res := c.Get(buf(), q, q.Limit(tt.tcp))
			if !res.Hit {
				t.Fatal("miss")
			}
			if len(out) > q.Limit(tt.tcp) {
				t.Errorf("%d bytes over the limit %d", len(out), q.Limit(tt.tcp))
			}
			m := unpack(t, out)
			if m.Truncated != tt.wantTC {
				t.Errorf("TC %v, want %v", m.Truncated, tt.wantTC)
			}
			if tt.wantTC && (len(m.Answer) != 0 || len(m.Question) != 1) {
				t.Errorf("truncated answer has %d records, %d questions", len(m.Answer), len(m.Question))
			}
			if !tt.wantTC && len(m.Answer) != 40 {
				t.Errorf("%d answers", len(m.Answer))
			}
			opt := m.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT %v, want %v", opt != nil, tt.wantOPT)
			}
			if opt != nil && (opt.Do() != tt.wantDO || opt.UDPSize() != 1232) {
				t.Errorf("OPT %v", opt)
			}
		})
	}
}

func TestKeyedByDOAndCD(t *testing.T) {
	c := newCache(t, DefaultConfig(), newClock())
	plain := req(t, "k.example.", dns.TypeA, nil)
	if _, err := c.Set(parse(t, plain).Key(), answer(t, plain, dns.RcodeSuccess, rrs(t, "k.example. 60 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*dns.Msg)
		hit  bool
	}{
		{"same", nil, true},
		{"EDNS without DO shares the entry", func(m *dns.Msg) { m.SetEdns0(1232, false) }, true},
		{"DO", func(m *dns.Msg) { m.SetEdns0(1232, true) }, false},
		{"CD", func(m *dns.Msg) { m.CheckingDisabled = true }, false},
		{"other type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA }, false},
		{"other class", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := parse(t, req(t, "K.example.", dns.TypeA, tt.edit))
			out, res := c.Get(buf(), q, 512)
			if res.Hit != tt.hit {
				t.Fatalf("hit %v, want %v", res.Hit, tt.hit)
			}
			if res.Hit && unpack(t, out).CheckingDisabled != q.CD() {
				t.Error("CD not echoed")
			}
		})
	}
}

func TestTTLPolicy(t *testing.T) {
	soa := func(ttl, minttl uint32) dns.RR {
		return &dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
			Ns: "ns.example.", Mbox: "h.example.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: minttl}
	}
	tests := []struct {
		name     string
		cfg      func(*Config)
		rcode    int
		answers  []string
		ns       []dns.RR
		wantKind Kind
		wantTTL  uint32 // entry TTL in seconds; 0 = not cached
	}{
		{"positive: smallest TTL", nil, dns.RcodeSuccess, []string{"n.example. 30 IN A 192.0.2.1", "n.example. 90 IN A 192.0.2.2"}, nil, Success, 30},
		{"positive: max TTL", nil, dns.RcodeSuccess, []string{"n.example. 86400 IN A 192.0.2.1"}, nil, Success, 3600},
		{"positive: min TTL", func(c *Config) { c.MinTTL = 10 * time.Second }, dns.RcodeSuccess, []string{"n.example. 2 IN A 192.0.2.1"}, nil, Success, 10},
		{"positive: TTL 0 not cached", nil, dns.RcodeSuccess, []string{"n.example. 0 IN A 192.0.2.1"}, nil, noCache, 0},
		{"NXDOMAIN: SOA MINIMUM", nil, dns.RcodeNameError, nil, []dns.RR{soa(3600, 60)}, Denial, 60},
		{"NXDOMAIN: SOA TTL", nil, dns.RcodeNameError, nil, []dns.RR{soa(20, 600)}, Denial, 20},
		{"NODATA: negative max TTL", func(c *Config) { c.NegativeMaxTTL = 15 * time.Second }, dns.RcodeSuccess, nil, []dns.RR{soa(600, 600)}, Denial, 15},
		{"NXDOMAIN without SOA not cached", nil, dns.RcodeNameError, nil, nil, noCache, 0},
		{"SERVFAIL: short TTL", nil, dns.RcodeServerFailure, nil, nil, ServFail, 5},
		{"SERVFAIL caching off", func(c *Config) { c.ServfailTTL = 0 }, dns.RcodeServerFailure, nil, nil, noCache, 0},
		{"REFUSED not cached", nil, dns.RcodeRefused, nil, nil, noCache, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			clk := newClock()
			c := newCache(t, cfg, clk)
			b := req(t, "n.example.", dns.TypeA, nil)
			q := parse(t, b)
			e, err := c.Set(q.Key(), answer(t, b, tt.rcode, rrs(t, tt.answers...), tt.ns))
			if err != nil {
				t.Fatal(err)
			}
			if e.kind != tt.wantKind {
				t.Fatalf("kind %d, want %d", e.kind, tt.wantKind)
			}
			out, res := c.Get(buf(), q, 512)
			if res.Hit != (tt.wantTTL > 0) {
				t.Fatalf("hit %v", res.Hit)
			}
			if !res.Hit {
				// Still answerable through Write, with the backend's TTLs.
				m := unpack(t, c.Write(buf(), e, q, 512))
				if m.Rcode != tt.rcode {
					t.Errorf("rcode %d", m.Rcode)
				}
				return
			}
			m := unpack(t, out)
			if m.Rcode != tt.rcode {
				t.Errorf("rcode %d, want %d", m.Rcode, tt.rcode)
			}
			for _, ttl := range ttls(m) {
				if ttl < tt.wantTTL {
					t.Errorf("record TTL %d below the entry TTL %d", ttl, tt.wantTTL)
				}
			}
			if tt.wantKind == Denial && ttls(m)[0] != tt.wantTTL {
				t.Errorf("SOA TTL %d, want %d (RFC 2308 §3)", ttls(m)[0], tt.wantTTL)
			}
			clk.Advance(time.Duration(tt.wantTTL)*time.Second - time.Millisecond)
			if _, res := c.Get(buf(), q, 512); !res.Hit {
				t.Error("miss just before expiry")
			}
			clk.Advance(time.Millisecond)
			if _, res := c.Get(buf(), q, 512); res.Hit {
				t.Error("hit at expiry")
			}
		})
	}
}

func TestServeStale(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServeStale = 10 * time.Minute
	clk := newClock()
	c := newCache(t, cfg, clk)
	b := req(t, "s.example.", dns.TypeA, nil)
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "s.example. 300 IN A 192.0.2.1", "s.example. 10 IN A 192.0.2.2"), nil)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		advance   time.Duration
		ok, stale bool
		wantTTLs  []uint32
	}{
		{5 * time.Second, true, false, []uint32{295, 5}},
		{6 * time.Second, true, true, []uint32{30, 10}}, // RFC 8767 §4: capped at 30
		{10 * time.Minute, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.advance), func(t *testing.T) {
			clk.Advance(tt.advance)
			out, stale, ok := c.GetStale(buf(), q, 512)
			if ok != tt.ok || stale != tt.stale {
				t.Fatalf("ok %v stale %v, want %v %v", ok, stale, tt.ok, tt.stale)
			}
			if ok {
				if got := ttls(unpack(t, out)); !slices.Equal(got, tt.wantTTLs) {
					t.Errorf("TTLs %v, want %v", got, tt.wantTTLs)
				}
			}
		})
	}
}

func TestPrefetchSignal(t *testing.T) {
	clk := newClock()
	c := newCache(t, DefaultConfig(), clk)
	b := req(t, "p.example.", dns.TypeA, nil)
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "p.example. 100 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	get := func() Result { _, r := c.Get(buf(), q, 512); return r }
	if r := get(); r.Prefetch {
		t.Fatal("prefetch with 90% of the TTL left")
	}
	clk.Advance(91 * time.Second)
	if r := get(); !r.Hit || !r.Prefetch {
		t.Fatalf("no prefetch with 9%% left after 2 hits: %+v", r)
	}
	if r := get(); r.Prefetch {
		t.Fatal("second prefetch while the first runs")
	}
	c.PrefetchDone(q.Key())
	if r := get(); !r.Prefetch {
		t.Fatal("no prefetch after the first one ended")
	}
	// A refresh replaces the entry; the new one starts with no hits.
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "p.example. 100 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(95 * time.Second)
	if r := get(); r.Prefetch {
		t.Fatal("prefetch after a single hit on the new entry")
	}
}

// TestRandomSubdomainFlood shows that names asked for once only churn the
// probation segments: a hot set asked for twice survives a flood of 20
// times the cache's capacity.
func TestRandomSubdomainFlood(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Size, cfg.NegativeSize = 2048, 2048
	clk := newClock()
	c := newCache(t, cfg, clk)
	set := func(name string, rcode int) *dnswire.Query {
		b := req(t, name, dns.TypeA, nil)
		q := parse(t, b)
		var ans []dns.RR
		var ns []dns.RR
		if rcode == dns.RcodeSuccess {
			ans = rrs(t, name+" 3600 IN A 192.0.2.1")
		} else {
			ns = rrs(t, "example. 3600 IN SOA ns.example. h.example. 1 1 1 1 3600")
		}
		if _, err := c.Set(q.Key(), answer(t, b, rcode, ans, ns)); err != nil {
			t.Fatal(err)
		}
		return q
	}
	const hot = 200
	var hotSet []*dnswire.Query
	for i := range hot {
		rcode := dns.RcodeSuccess
		if i%2 == 1 {
			rcode = dns.RcodeNameError // hot NXDOMAINs too: search-path expansions
		}
		q := set(fmt.Sprintf("hot%d.example.", i), rcode)
		if _, res := c.Get(buf(), q, 512); !res.Hit { // the second use
			t.Fatal("hot entry missing right after insertion")
		}
		hotSet = append(hotSet, q)
	}
	for i := range 20 * 2048 {
		rcode := dns.RcodeNameError
		if i%4 == 0 {
			rcode = dns.RcodeSuccess // wildcard zones answer random names too
		}
		set(fmt.Sprintf("r%x.flood.example.", i*7919), rcode)
	}
	missing := 0
	for _, q := range hotSet {
		if _, res := c.Get(buf(), q, 512); !res.Hit {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d hot entries evicted by the flood", missing, hot)
	}
	st := c.Stats()
	if st.Evictions[0] == 0 || st.Evictions[1] == 0 {
		t.Errorf("the flood evicted nothing: %+v", st)
	}
}

func TestCapacityBounds(t *testing.T) {
	for _, size := range []int{1, 10, 100, 5000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Size, cfg.NegativeSize = size, size/2
			c := newCache(t, cfg, newClock())
			pc, nc := c.Capacity()
			if pc < size || pc >= size+len(c.shards) || nc < size/2 || nc >= size/2+len(c.shards) {
				t.Fatalf("capacity %d/%d for %d/%d with %d shards", pc, nc, size, size/2, len(c.shards))
			}
			for i := range 3 * size {
				b := req(t, fmt.Sprintf("n%d.example.", i), dns.TypeA, nil)
				q := parse(t, b)
				resp := answer(t, b, dns.RcodeSuccess, rrs(t, fmt.Sprintf("n%d.example. 60 IN A 192.0.2.1", i)), nil)
				if i%2 == 1 {
					resp = answer(t, b, dns.RcodeNameError, nil, rrs(t, "example. 60 IN SOA ns.example. h.example. 1 1 1 1 60"))
				}
				if _, err := c.Set(q.Key(), resp); err != nil {
					t.Fatal(err)
				}
				if p, n := c.Len(); p > pc || n > nc {
					t.Fatalf("%d/%d entries over capacity %d/%d", p, n, pc, nc)
				}
			}
		})
	}
	t.Run("max entry size", func(t *testing.T) {
		c := newCache(t, DefaultConfig(), newClock())
		b := req(t, "txt.example.", dns.TypeTXT, nil)
		long := fmt.Sprintf(`txt.example. 60 IN TXT "%s" "%s" "%s" "%s" "%s" "%s"`, bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250),
			bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250), bytes.Repeat([]byte("x"), 250))
		e, err := c.Set(parse(t, b).Key(), answer(t, b, dns.RcodeSuccess, rrs(t, long), nil))
		if err != nil {
			t.Fatal(err)
		}
		if e.kind != noCache {
			t.Error("an answer over MaxEntrySize was cached")
		}
	})
}

func TestGetAllocs(t *testing.T) {
	c := newCache(t, DefaultConfig(), nil)
	b := req(t, "a.example.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false) })
	q := parse(t, b)
	if _, err := c.Set(q.Key(), answer(t, b, dns.RcodeSuccess, rrs(t, "a.example. 60 IN A 192.0.2.1"), nil)); err != nil {
		t.Fatal(err)
	}
	dst := buf()
	if n := testing.AllocsPerRun(1000, func() { c.Get(dst, q, 1232) }); n != 0 {
		t.Errorf("Get allocates %v times per hit", n)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"zero size", func(c *Config) { c.Size = 0 }, false},
		{"negative size", func(c *Config) { c.NegativeSize = -1 }, false},
		{"sub-second TTL", func(c *Config) { c.MaxTTL = 1500 * time.Millisecond }, false},
		{"max below min", func(c *Config) { c.MinTTL = time.Hour; c.MaxTTL = time.Minute }, false},
		{"SERVFAIL over 5m", func(c *Config) { c.ServfailTTL = 10 * time.Minute }, false},
		{"entry size", func(c *Config) { c.MaxEntrySize = 100 }, false},
		{"serve-stale off", func(c *Config) { c.ServeStale = 0 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}

// TestConcurrentUse runs lookups, stores, stale reads and prefetch
// bookkeeping on a few keys from several goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	clk := newClock()
	cfg := DefaultConfig()
	cfg.Size, cfg.NegativeSize = 32, 32
	c := newCache(t, cfg, clk)
	type kv struct {
		q    *dnswire.Query
		resp *dns.Msg
	}
	var kvs []kv
	for i := range 64 {
		name := fmt.Sprintf("c%d.example.", i)
		b := req(t, name, dns.TypeA, nil)
		kvs = append(kvs, kv{parse(t, b), answer(t, b, dns.RcodeSuccess, rrs(t, name+" 5 IN A 192.0.2.1"), nil)})
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			dst := buf()
			for i := range 2000 {
				it := kvs[(i*7+g)%len(kvs)]
				q := *it.q // Write reads the query; each goroutine has its own
				switch i % 5 {
				case 0:
					_, _ = c.Set(q.Key(), it.resp)
				case 1:
					_, _, _ = c.GetStale(dst, &q, 512)
				case 2:
					c.RefreshFailed(q.Key())
				case 3:
					c.PrefetchDone(q.Key())
				default:
					_, _ = c.Get(dst, &q, 512)
				}
				if g == 0 && i%100 == 0 {
					clk.Advance(time.Second)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if p, n := c.Len(); p > cfg.Size || n > cfg.NegativeSize {
		t.Errorf("%d/%d entries over capacity", p, n)
	}
}
