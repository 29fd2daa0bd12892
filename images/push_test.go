package images

import "testing"

// TestPlainHTTP: only registries on the loopback are reached over HTTP
// without being asked.
func TestPlainHTTP(t *testing.T) {
	for ref, want := range map[string]bool{
		"localhost:5000/nodedns/x:1":  true,
		"127.0.0.1:36789/nodedns":     true,
		"oci://127.0.0.1:5000/n":      true,
		"[::1]:5000/nodedns":          true,
		"localhost/nodedns":           true,
		"ghcr.io/nodedns/x:1":         false,
		"10.0.0.1:5000/nodedns":       false,
		"localhost.example.com/n":     false,
		"registry.local:5000/nodedns": false,
	} {
		if got := PlainHTTP(ref); got != want {
			t.Errorf("PlainHTTP(%q) = %v, want %v", ref, got, want)
		}
	}
}
