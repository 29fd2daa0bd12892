package diagnose

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
)

// kernelHex formats ip as the kernel does in /proc/net/{tcp,udp}[6]: each
// 32-bit word of the address, as stored in network order, printed as a
// number of the host's byte order ("%08X", net/ipv4/udp.c, net/ipv6/
// datagram.c).
func kernelHex(ip net.IP) string {
	var b strings.Builder
	for w := 0; w < len(ip); w += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[w:]))
	}
	return b.String()
}

// TestParseProcNetHostOrder decodes lines printed in this host's byte
// order, whatever it is, back to the addresses they were printed from.
func TestParseProcNetHostOrder(t *testing.T) {
	for _, s := range []string{"169.254.20.10", "10.96.0.10", "0.0.0.0", "fd00::10", "2001:db8::1:2:3"} {
		ip := net.ParseIP(s)
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		data := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
			"   0: " + kernelHex(ip) + ":0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 0\n"
		got, err := parseProcNet(data)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(got) != 1 || !got[0].IP.Equal(ip) || got[0].Port != 53 {
			t.Errorf("%s printed as %s: parsed %+v", s, kernelHex(ip), got)
		}
	}
}
