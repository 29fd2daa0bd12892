package images

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
)

// checkIPTables runs both iptables backends from root (an unpacked image),
// in a new network and mount namespace, so only a throwaway namespace's
// (empty) tables are read. It needs root and the host's architecture.
func checkIPTables(ctx context.Context, root string) error {
	for _, bin := range []string{"iptables-legacy", "iptables-nft", "ip6tables-legacy", "ip6tables-nft"} {
		out, err := exec.CommandContext(ctx, "unshare", "--net", "--mount", "chroot", root, bin, "-t", "filter", "-S").CombinedOutput()
		if err != nil {
			return fmt.Errorf("debian base: %s does not run from the base: %w\n%s", bin, err, out)
		}
		if !bytes.Contains(out, []byte("-P INPUT ACCEPT")) {
			return fmt.Errorf("debian base: %s -S printed %q, want the default policies", bin, out)
		}
	}
	return nil
}
