package debian

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// deb is the part of a .deb the root filesystem needs (deb(5)).
type deb struct {
	// control is the control stanza (control.tar's ./control);
	// md5sums the file list with digests, when the package has one.
	control, md5sums []byte
	// data is the uncompressed data.tar.
	data []byte
}

// readDeb splits a .deb into its control stanza, its md5sums and its
// uncompressed data.tar.
func readDeb(b []byte) (deb, error) {
	members, err := readAr(bytes.NewReader(b))
	if err != nil {
		return deb{}, err
	}
	if len(members) < 3 || members[0].Name != "debian-binary" || !bytes.HasPrefix(members[0].Data, []byte("2.")) {
		return deb{}, errors.New("not a format 2.x .deb (no debian-binary member first)")
	}
	var d deb
	for _, m := range members[1:] {
		switch {
		case strings.HasPrefix(m.Name, "control.tar"):
			ctl, err := decompress(m.Name, m.Data)
			if err != nil {
				return deb{}, err
			}
			if d.control, d.md5sums, err = controlFiles(ctl); err != nil {
				return deb{}, fmt.Errorf("%s: %w", m.Name, err)
			}
		case strings.HasPrefix(m.Name, "data.tar"):
			if d.data, err = decompress(m.Name, m.Data); err != nil {
				return deb{}, err
			}
		}
	}
	if d.control == nil || d.data == nil {
		return deb{}, errors.New("no control.tar or data.tar member")
	}
	return d, nil
}

// maxUnpacked bounds one decompressed member; libc6's data.tar is about
// 13 MiB.
const maxUnpacked = 1 << 30

// decompress returns member's content, by the compression its name says.
func decompress(name string, b []byte) ([]byte, error) {
	var r io.Reader
	switch path.Ext(name) {
	case ".tar":
		return b, nil
	case ".gz":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = zr
	case ".xz":
		zr, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r = zr
	case ".zst":
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("%s: unknown compression", name)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxUnpacked+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) > maxUnpacked {
		return nil, fmt.Errorf("%s: more than %d bytes unpacked", name, maxUnpacked)
	}
	return out, nil
}

// controlFiles returns ./control and ./md5sums from a control.tar.
func controlFiles(ctl []byte) (control, md5sums []byte, err error) {
	tr := tar.NewReader(bytes.NewReader(ctl))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		switch path.Clean(h.Name) {
		case "control":
			if control, err = io.ReadAll(tr); err != nil {
				return nil, nil, err
			}
		case "md5sums":
			if md5sums, err = io.ReadAll(tr); err != nil {
				return nil, nil, err
			}
		}
	}
	if control == nil {
		return nil, nil, errors.New("no ./control")
	}
	return control, md5sums, nil
}
