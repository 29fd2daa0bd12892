package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer built by FilesLayer.
type File struct {
	// Path inside the image, without a leading slash ("usr/local/bin/x").
	Path string
	// Data is the file's content. A File with Dir set has none.
	Data []byte
	// Mode holds the permission bits (0o755).
	Mode int64
	// Dir makes the entry a directory.
	Dir bool
	// UID and GID own the entry.
	UID, GID int
	// Xattrs are extended attributes, written as PAX records
	// "SCHILY.xattr.<name>" (the form containerd and runc unpack), e.g.
	// "security.capability" from FileCapabilities.
	Xattrs map[string][]byte
}

// paxXattr prefixes an extended attribute's PAX record name (GNU tar and
// star's convention; archive/tar writes the records in sorted order).
const paxXattr = "SCHILY.xattr."

// FilesLayer writes files as one layer: entries sorted by path, each parent
// directory present (0755 root), every timestamp set to mtime, no user or
// group names. The same files and mtime give the same digest.
func FilesLayer(files []File, mtime time.Time) (v1.Layer, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := strings.Trim(path.Clean("/"+f.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("layer entry %q: empty path", f.Path)
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: p, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if len(f.Xattrs) > 0 {
			h.PAXRecords = make(map[string]string, len(f.Xattrs))
			for k, v := range f.Xattrs {
				h.PAXRecords[paxXattr+k] = string(v)
			}
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return layerFromBytes(buf.Bytes())
}

// layerFromBytes makes an OCI gzip layer of an uncompressed tar held in
// memory; the compressed form is computed once and kept.
func layerFromBytes(b []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compress layer: %w", err)
	}
	return l, nil
}

// uncompressedSize reads a layer's tar stream to count its bytes.
func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}
