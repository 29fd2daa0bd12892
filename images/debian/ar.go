package debian

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A .deb is an ar archive (deb(5)): the magic "!<arch>\n", then members,
// each a 60-byte header (name, mtime, owner, group, mode, size, "`\n") and
// its data padded to an even length. Only the common System V layout is
// read: member names up to 16 bytes, with or without the trailing '/'.
const (
	arMagic      = "!<arch>\n"
	arHeaderSize = 60
)

// arMember is one member of an ar archive.
type arMember struct {
	Name string
	Data []byte
}

// maxArMember bounds one member: the largest .deb of the base is a few
// megabytes; a corrupt size field must not allocate gigabytes.
const maxArMember = 512 << 20

// readAr returns the members of the ar archive in r, in order.
func readAr(r io.Reader) ([]arMember, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return nil, errors.New("not an ar archive (no !<arch> magic)")
	}
	var members []arMember
	hdr := make([]byte, arHeaderSize)
	for {
		if _, err := io.ReadFull(br, hdr); err == io.EOF {
			return members, nil
		} else if err != nil {
			return nil, fmt.Errorf("ar header after %d members: %w", len(members), err)
		}
		if !bytes.Equal(hdr[58:60], []byte("`\n")) {
			return nil, fmt.Errorf("ar header after %d members: bad terminator %q", len(members), hdr[58:60])
		}
		name := strings.TrimSuffix(strings.TrimRight(string(hdr[0:16]), " "), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil || size < 0 || size > maxArMember {
			return nil, fmt.Errorf("ar member %q: bad size %q", name, hdr[48:58])
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("ar member %q: %w", name, err)
		}
		if size%2 == 1 {
			if _, err := br.ReadByte(); err != nil && err != io.EOF {
				return nil, fmt.Errorf("ar member %q: padding: %w", name, err)
			}
		}
		members = append(members, arMember{Name: name, Data: data})
	}
}
