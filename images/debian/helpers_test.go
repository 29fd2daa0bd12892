package debian

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"

	"github.com/ulikunitz/xz"
)

// writeAr writes members as an ar archive, as dpkg-deb does.
func writeAr(members []arMember) []byte {
	var b bytes.Buffer
	b.WriteString(arMagic)
	for _, m := range members {
		fmt.Fprintf(&b, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", m.Name, 0, 0, 0, "100644", len(m.Data))
		b.Write(m.Data)
		if len(m.Data)%2 == 1 {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// tarEntry is one member of a test tar.
type tarEntry struct {
	name     string
	typ      byte
	data     string
	linkname string
	mode     int64
}

func writeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.linkname, Mode: mode, Uname: "root", Gname: "root"}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// makeDeb builds a .deb of package name: control.tar.gz and an
// xz-compressed data.tar holding data.
func makeDeb(t *testing.T, name string, data []tarEntry) []byte {
	t.Helper()
	control := fmt.Sprintf("Package: %s\nVersion: 1.0-1\nArchitecture: amd64\nDescription: test\n two lines\n", name)
	ctl := writeTar(t, []tarEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "./control", typ: tar.TypeReg, data: control},
		{name: "./md5sums", typ: tar.TypeReg, data: "0123 usr/bin/x\n"},
	})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(ctl)
	zw.Close()
	var xzb bytes.Buffer
	xw, err := xz.NewWriter(&xzb)
	if err != nil {
		t.Fatal(err)
	}
	xw.Write(writeTar(t, data))
	if err := xw.Close(); err != nil {
		t.Fatal(err)
	}
	return writeAr([]arMember{
		{Name: "debian-binary", Data: []byte("2.0\n")},
		{Name: "control.tar.gz", Data: gz.Bytes()},
		{Name: "data.tar.xz", Data: xzb.Bytes()},
	})
}
