package nodenet_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/dnstest"
	"github.com/nodedns/nodedns/shared/netnstest"
)

// TestE2EBackendConntrack sends a burst of pods' queries with many misses
// at once to a frontend on a node where conntrack is active (kube-proxy's
// NAT rules), and counts the conntrack entries it adds: the pods' queries
// are NOTRACKed, and so must be the misses' connections to the backend,
// which also must be kept and reused rather than dialled per miss.
func TestE2EBackendConntrack(t *testing.T) {
	const (
		clients = 50
		queries = 2000
		names   = 500 // so 500 misses, the first query of each name
		bound   = 64
		// backendDelay is the backend's time per answer.
		backendDelay = 10 * time.Millisecond
	)
	c := newCluster(t)
	// The backend takes a few milliseconds per answer, as for a name it
	// forwards, so that the clients' misses are in flight together.
	var answered atomic.Int64
	slow := answer(localAns, &answered)
	if err := c.node.Do(func() error {
		c.backend.srv = dnstest.Start(t, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			time.Sleep(backendDelay)
			slow(w, r)
		}))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.backend.ready.Store(true)
	// No reconcile during the test: the second part removes rules by hand.
	c.start(t, "--sync-interval=1h")
	waitFor(t, 10*time.Second, "/ready 200", func() bool {
		code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		return code == http.StatusOK
	})
	_, port, err := net.SplitHostPort(c.backend.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// burst sends the pods' queries, names prefixed with prefix, in rounds:
	// in each, every client asks one name at once, and the next round
	// starts when the last answer is in, as when many pods start together.
	// Each name is asked first (a miss) before it is asked again. It
	// returns the conntrack entries added.
	burst := func(t *testing.T, prefix string) (added int, detail string) {
		t.Helper()
		before := conntrackCount(t, c.node)
		start := time.Now()
		var failed atomic.Int64
		var firstErr atomic.Value
		for round := range queries / clients {
			var wg sync.WaitGroup
			for w := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("%s%d.example.", prefix, (round*clients+w)%names)
					if _, err := ask(c.pod, "udp", linkLocal+":53", name, 2*time.Second); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}()
			}
			wg.Wait()
		}
		took := time.Since(start)
		if n := failed.Load(); n > 0 {
			t.Errorf("%d of %d queries failed, the first: %v", n, queries, firstErr.Load())
		}
		added = conntrackCount(t, c.node) - before
		return added, fmt.Sprintf("in %v; entries to the backend's port %s by state: %s", took.Round(time.Millisecond), port, conntrackStates(t, c.node, port))
	}

	t.Run("notrack and a persistent pool", func(t *testing.T) {
		added, detail := burst(t, "a")
		t.Logf("FIGURE backend conntrack: %d entries added by %d pod queries in rounds of %d concurrent clients over %d names (%d misses, %v each at the backend), NAT active, %s",
			added, queries, clients, names, names, backendDelay, detail)
		if added > bound {
			t.Errorf("conntrack grew by %d, want at most %d", added, bound)
		}
	})

	t.Run("persistent pool alone", func(t *testing.T) {
		// Without the backend's NOTRACK rules every connection to it is
		// tracked, the pooled ones included once they carry a packet:
		// what is left is the pool's own count.
		deleted := 0
		for _, dir := range [][]string{{"-d", "127.0.0.1", "--dport", port, "to"}, {"-s", "127.0.0.1", "--sport", port, "from"}} {
			comment := fmt.Sprintf("nodedns: notrack tcp %s backend 127.0.0.1:%s", dir[4], port)
			if _, err := c.node.Exec("iptables", "-t", "raw", "-D", "OUTPUT", dir[0], dir[1], "-p", "tcp", "-m", "tcp", dir[2], dir[3],
				"-m", "comment", "--comment", comment, "-j", "NOTRACK"); err == nil {
				deleted++
			}
		}
		if deleted != 2 {
			t.Fatalf("deleted %d of the backend's 2 NOTRACK rules", deleted)
		}
		added, detail := burst(t, "b")
		t.Logf("FIGURE backend conntrack, pool alone (backend NOTRACK rules deleted): %d entries added by %d pod queries in rounds of %d concurrent clients over %d names, NAT active, %s",
			added, queries, clients, names, detail)
		if added > bound {
			t.Errorf("conntrack grew by %d, want at most %d", added, bound)
		}
	})
}

// conntrackStates summarises ns's conntrack entries whose original
// destination port is port, by TCP state ("none" when there are none).
func conntrackStates(t *testing.T, ns *netnstest.NetNS, port string) string {
	t.Helper()
	states := map[string]int{}
	if err := ns.Do(func() error {
		// /proc/self/net is the netns of the process's main thread; this
		// thread's is thread-self's.
		b, err := os.ReadFile("/proc/thread-self/net/nf_conntrack")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 6 || f[2] != "tcp" {
				continue
			}
			for _, kv := range f {
				if strings.HasPrefix(kv, "dport=") {
					if kv == "dport="+port {
						states[f[5]]++
					}
					break // the original direction's only
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("conntrack entries: %v", err)
	}
	if len(states) == 0 {
		return "none"
	}
	var out []string
	for s, n := range states {
		out = append(out, fmt.Sprintf("%d %s", n, s))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
