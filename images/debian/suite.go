package debian

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// Index fetches the Packages index of suite's main component for arch
// (it lists the "all" packages too), after checking it against the sha256
// and size the suite's Release file gives. The Release file's signature is
// not checked: the lock made from the index is reviewed and committed, and
// every build checks each .deb against it.
func (f Fetcher) Index(ctx context.Context, suite, arch string) (map[string]Package, string, error) {
	release, err := f.Get(ctx, "dists/"+suite+"/Release")
	if err != nil {
		return nil, "", err
	}
	rel := "main/binary-" + arch + "/Packages.xz"
	sum, size, err := releaseSum(release, rel)
	if err != nil {
		return nil, "", fmt.Errorf("dists/%s/Release: %w", suite, err)
	}
	compressed, err := f.Get(ctx, "dists/"+suite+"/"+rel)
	if err != nil {
		return nil, "", err
	}
	if int64(len(compressed)) != size || sha256Sum(compressed) != sum {
		return nil, "", fmt.Errorf("dists/%s/%s: size %d sha256 %s, Release says %d %s", suite, rel, len(compressed), sha256Sum(compressed), size, sum)
	}
	zr, err := xz.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, "", fmt.Errorf("dists/%s/%s: %w", suite, rel, err)
	}
	idx, err := ParsePackages(zr)
	if err != nil {
		return nil, "", fmt.Errorf("dists/%s/%s: %w", suite, rel, err)
	}
	return idx, controlField(release, "Date"), nil
}

// releaseSum finds the sha256 and size of file in a Release file's SHA256
// section (" <sha256> <size> <path>" lines).
func releaseSum(release []byte, file string) (string, int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(release))
	in := false
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, " ") {
			in = strings.HasPrefix(l, "SHA256:")
			continue
		}
		if f := strings.Fields(l); in && len(f) == 3 && f[2] == file {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return "", 0, fmt.Errorf("size of %s: %w", file, err)
			}
			return f[0], n, nil
		}
	}
	return "", 0, fmt.Errorf("no SHA256 line for %s", file)
}
