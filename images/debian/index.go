// Package debian assembles a container image's root filesystem from
// Debian binary packages without dpkg, root or a chroot, the way
// distroless images are made: a lock file pins each package (name,
// version, architecture, size, sha256, pool path); the .debs are fetched
// from a mirror, checked against the lock and cached; the data.tar of each
// is unpacked into one sorted tar with the package's control stanza under
// /var/lib/dpkg/status.d so that image scanners see what is installed.
// Maintainer scripts are not run.
package debian

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Package is one stanza of a Packages index (deb-control(5) fields).
type Package struct {
	Name         string
	Version      string
	Architecture string
	// Depends and PreDepends are the raw relationship fields.
	Depends, PreDepends string
	// Provides lists the virtual packages this one provides.
	Provides []string
	// Filename is the pool path below the mirror's root.
	Filename string
	Size     int64
	SHA256   string
}

// maxStanza bounds one line of a Packages index (long Description and
// Tag fields are a few kilobytes).
const maxStanza = 1 << 20

// ParsePackages reads a Packages index (uncompressed) and returns its
// stanzas by package name; of several stanzas of one name, the last wins.
func ParsePackages(r io.Reader) (map[string]Package, error) {
	out := map[string]Package{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxStanza)
	var p Package
	var field string
	line := 0
	flush := func() error {
		if p.Name == "" {
			return nil
		}
		if p.Filename == "" || p.SHA256 == "" || p.Version == "" {
			return fmt.Errorf("Packages stanza %s (before line %d): no Version, Filename or SHA256", p.Name, line)
		}
		out[p.Name] = p
		p = Package{}
		return nil
	}
	for sc.Scan() {
		line++
		l := sc.Text()
		if strings.TrimSpace(l) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			field = ""
			continue
		}
		if l[0] == ' ' || l[0] == '\t' { // continuation of a multi-line field
			if field == "Depends" || field == "Pre-Depends" || field == "Provides" {
				return nil, fmt.Errorf("Packages line %d: continued %s field not supported", line, field)
			}
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("Packages line %d: no field name in %q", line, l)
		}
		field, v = k, strings.TrimSpace(v)
		switch k {
		case "Package":
			p.Name = v
		case "Version":
			p.Version = v
		case "Architecture":
			p.Architecture = v
		case "Depends":
			p.Depends = v
		case "Pre-Depends":
			p.PreDepends = v
		case "Provides":
			for _, alt := range strings.Split(v, ",") {
				if n := relationName(alt); n != "" {
					p.Provides = append(p.Provides, n)
				}
			}
		case "Filename":
			p.Filename = v
		case "Size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("Packages line %d: Size %q: %w", line, v, err)
			}
			p.Size = n
		case "SHA256":
			p.SHA256 = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("Packages line %d: %w", line, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// relationName returns the package name of one relationship term,
// "libc6:any (>= 2.34) [amd64] <!nocheck>" -> "libc6".
func relationName(term string) string {
	term = strings.TrimSpace(term)
	if i := strings.IndexAny(term, " (<["); i >= 0 {
		term = term[:i]
	}
	name, _, _ := strings.Cut(term, ":")
	return name
}

// parseRelations splits a Depends field into its clauses, each a list of
// alternatives ("a | b"), as package names.
func parseRelations(field string) [][]string {
	var out [][]string
	for _, clause := range strings.Split(field, ",") {
		var alts []string
		for _, alt := range strings.Split(clause, "|") {
			if n := relationName(alt); n != "" {
				alts = append(alts, n)
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// controlField returns the value of a single-line field of a control
// stanza, or "".
func controlField(stanza []byte, name string) string {
	for _, l := range bytes.Split(stanza, []byte("\n")) {
		if k, v, ok := bytes.Cut(l, []byte(":")); ok && string(k) == name {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}
