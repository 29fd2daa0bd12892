package images

import (
	"context"
	"strings"
	"testing"
)

// TestBuildImageRefuses: an architecture without a base lock, or an image
// that does not exist, is an error before anything is built.
func TestBuildImageRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, image string
		archs       []string
		err         string
	}{
		{"riscv64", BackendName, []string{"amd64", "riscv64"}, `architecture "riscv64": want one of amd64, arm64`},
		{"no such image", "nodedns-other", []string{"amd64"}, `no image "nodedns-other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildImage(context.Background(), Tree{Root: t.TempDir(), Version: "v"}, DefaultRegistry, tc.image, tc.archs, t.Logf)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}
