package debian

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A lock file pins the packages of one image for one architecture, one
// package a line, sorted by name:
//
//	# comment
//	<name> <version> <architecture> <size> <sha256> <pool path>
//
// The fields come from the mirror's Packages index; the build fetches
// <mirror>/<pool path> and refuses a file of another size or digest.

// Locked is one pinned package.
type Locked struct {
	Name, Version, Architecture string
	Size                        int64
	SHA256                      string
	// Filename is the pool path below the mirror's root
	// ("pool/main/i/iptables/iptables_1.8.9-2_amd64.deb").
	Filename string
}

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// poolPath keeps a lock from naming anything but a .deb in the pool.
	poolPath = regexp.MustCompile(`^pool/[A-Za-z0-9.+~_/-]+\.deb$`)
)

// ParseLock reads a lock file.
func ParseLock(r io.Reader) ([]Locked, error) {
	var out []Locked
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 6 {
			return nil, fmt.Errorf("lock line %d: %d fields, want 6 (name version architecture size sha256 path)", n, len(f))
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || size <= 0 {
			return nil, fmt.Errorf("lock line %d: size %q", n, f[3])
		}
		if !sha256Hex.MatchString(f[4]) {
			return nil, fmt.Errorf("lock line %d: sha256 %q is not 64 lower-case hex digits", n, f[4])
		}
		if !poolPath.MatchString(f[5]) || strings.Contains(f[5], "..") {
			return nil, fmt.Errorf("lock line %d: path %q is not a .deb in the pool", n, f[5])
		}
		if len(out) > 0 && out[len(out)-1].Name >= f[0] {
			return nil, fmt.Errorf("lock line %d: %s is not sorted after %s, or repeated", n, f[0], out[len(out)-1].Name)
		}
		out = append(out, Locked{Name: f[0], Version: f[1], Architecture: f[2], Size: size, SHA256: f[4], Filename: f[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lock line %d: %w", n, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lock: no packages")
	}
	return out, nil
}

// FormatLock writes pkgs as a lock file, after the header comment lines.
func FormatLock(header []string, pkgs []Package) []byte {
	sorted := append([]Package(nil), pkgs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b bytes.Buffer
	for _, h := range header {
		fmt.Fprintf(&b, "# %s\n", h)
	}
	for _, p := range sorted {
		fmt.Fprintf(&b, "%s %s %s %d %s %s\n", p.Name, p.Version, p.Architecture, p.Size, p.SHA256, p.Filename)
	}
	return b.Bytes()
}
