package diagnose

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodedns/nodedns/frontend/nodenet"
)

func TestParseProcNet(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the lines below are a little-endian host's; TestParseProcNetHostOrder covers every host")
	}
	const udp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  101: 0A14FEA9:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  102: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0
`
	got, err := parseProcNet(udp)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].IP.String() != "169.254.20.10" || got[0].Port != 53 || got[0].State != udpUnconnected || got[0].Inode != 4242 {
		t.Fatalf("parseProcNet = %+v", got)
	}
	if !got[1].IP.IsUnspecified() || got[1].Port != 5353 {
		t.Fatalf("wildcard = %+v", got[1])
	}
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 000000FD000000000000000010000000:0035 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0
`
	// fd00::10: four 32-bit words, each printed little-endian.
	got, err = parseProcNet(tcp6)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].IP.String() != "fd00::10" || got[0].State != tcpListen {
		t.Fatalf("tcp6 = %+v", got)
	}
	if _, err := parseProcNet("hdr\n 0: zz:0035 0 07 0 0 0 0 0 1\n"); err == nil {
		t.Error("bad address accepted")
	}
}

func TestNameservers(t *testing.T) {
	got := nameservers("# comment\nsearch x\nnameserver 10.0.0.2\nnameserver  fd00::1 \noptions ndots:5\n")
	if !slices.Equal(got, []string{"10.0.0.2", "fd00::1"}) {
		t.Fatalf("nameservers = %q", got)
	}
}

func TestClusterDNS(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"kind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\n- \"fd00::a\"\nclusterDomain: cluster.local\n", []string{"10.96.0.10", "fd00::a"}},
		{"clusterDNS: [169.254.20.10, '10.96.0.10']\n", []string{"169.254.20.10", "10.96.0.10"}},
		{"clusterDNS:\n  - 10.0.0.5\nfoo: bar\n", []string{"10.0.0.5"}},
		{"authentication:\n  clusterDNS: [1.1.1.1]\n", nil},
		{`{"kind": "KubeletConfiguration", "clusterDNS": ["10.100.0.10"]}`, []string{"10.100.0.10"}},
	} {
		if got := clusterDNS(tc.yaml); !slices.Equal(got, tc.want) {
			t.Errorf("clusterDNS(%q) = %q, want %q", tc.yaml, got, tc.want)
		}
	}
}

func writeProc(t *testing.T, count, limit string) string {
	dir := t.TempDir()
	nf := filepath.Join(dir, "sys", "net", "netfilter")
	if err := os.MkdirAll(nf, 0o755); err != nil {
		t.Fatal(err)
	}
	if count != "" {
		os.WriteFile(filepath.Join(nf, "nf_conntrack_count"), []byte(count+"\n"), 0o644)
		os.WriteFile(filepath.Join(nf, "nf_conntrack_max"), []byte(limit+"\n"), 0o644)
	}
	return dir
}

func TestCheckConntrack(t *testing.T) {
	for _, tc := range []struct {
		count, limit string
		ok           bool
		detail       string
	}{
		{"100", "1000", true, "100 of 1000 entries (10%)"},
		{"950", "1000", false, "950 of 1000 entries (95%)"},
		{"", "", true, "not loaded"},
	} {
		f := checkConntrack(Config{Proc: writeProc(t, tc.count, tc.limit)})
		if f.OK != tc.ok || !strings.Contains(f.Detail, tc.detail) || (!f.OK && f.Fix == "") {
			t.Errorf("checkConntrack(%s/%s) = %+v", tc.count, tc.limit, f)
		}
	}
}

func TestCheckKubelet(t *testing.T) {
	cfg := Config{}
	cfg.Net.Mode = "link-local"
	if err := cfg.Net.Validate(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg.KubeletConfig = path
	// Not mounted: not run, and saying how to make it run.
	if f := checkKubelet(cfg); f.OK || !f.Skipped || !strings.Contains(f.Detail, "not readable") || !strings.Contains(f.Fix, "frontend.kubeletConfig") {
		t.Errorf("unreadable: %+v", f)
	}
	// clusterDNS given on kubelet's command line: nothing to compare.
	os.WriteFile(path, []byte("kind: KubeletConfiguration\n"), 0o644)
	if f := checkKubelet(cfg); f.OK || !f.Skipped || !strings.Contains(f.Detail, "sets no clusterDNS") {
		t.Errorf("no clusterDNS: %+v", f)
	}
	os.WriteFile(path, []byte("clusterDNS:\n- 10.96.0.10\n"), 0o644)
	if f := checkKubelet(cfg); f.OK || !strings.Contains(f.Detail, "link-local mode needs --local-ip") {
		t.Errorf("mismatch: %+v", f)
	}
	os.WriteFile(path, []byte("clusterDNS: [169.254.20.10]\n"), 0o644)
	if f := checkKubelet(cfg); !f.OK || f.Skipped {
		t.Errorf("match: %+v", f)
	}
	// node-ip mode owns the ClusterIP too when given it: either address
	// is answered on the node; without it, only the node IP.
	cfg.Net = nodenet.Config{Mode: nodenet.ModeNodeIP, LocalIPs: []net.IP{net.ParseIP("10.0.0.5")}, ServiceIPs: []net.IP{net.ParseIP("10.96.0.10")}}
	if err := cfg.Net.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, dns := range []string{"10.0.0.5", "10.96.0.10"} {
		os.WriteFile(path, []byte("clusterDNS: ["+dns+"]\n"), 0o644)
		if f := checkKubelet(cfg); !f.OK || f.Skipped {
			t.Errorf("node-ip, clusterDNS %s: %+v", dns, f)
		}
	}
	cfg.Net.ServiceIPs = nil
	if f := checkKubelet(cfg); f.OK || !strings.Contains(f.Detail, "node-ip mode needs --local-ip") {
		t.Errorf("node-ip without --service-ip, clusterDNS 10.96.0.10: %+v", f)
	}
}

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		findings []Finding
		ok       bool
		want     string
	}{
		{"failure", []Finding{{Check: "a", OK: true, Detail: "fine"}, {Check: "b", Detail: "broken", Fix: "mend it"}}, false,
			"[ok  ] a: fine\n[FAIL] b: broken\n       fix: mend it\nsome checks failed\n"},
		// A check that did not run is marked SKIP and named in the last
		// line, never "all checks passed".
		{"skip", []Finding{{Check: "a", OK: true, Detail: "fine"}, {Check: "c", Skipped: true, Detail: "no file", Fix: "mount it"}}, true,
			"[ok  ] a: fine\n[SKIP] c: no file\n       to run it: mount it\nno check failed; 1 not run: c\n"},
		{"skip and failure", []Finding{{Check: "b", Detail: "broken"}, {Check: "c", Skipped: true, Detail: "no file"}}, false,
			"[FAIL] b: broken\n[SKIP] c: no file\nsome checks failed\n"},
		{"all pass", []Finding{{Check: "a", OK: true, Detail: "fine"}}, true, "[ok  ] a: fine\nall checks passed\n"},
	} {
		var b bytes.Buffer
		if got := Write(&b, tc.findings); got != tc.ok {
			t.Errorf("%s: Write = %v, want %v", tc.name, got, tc.ok)
		}
		if b.String() != tc.want {
			t.Errorf("%s: Write:\n%s\nwant:\n%s", tc.name, b.String(), tc.want)
		}
	}
}
