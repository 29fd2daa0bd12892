package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteArchive writes img as an OCI image layout in a tar file at path
// (OCI image spec, image-layout.md): oci-layout, index.json naming the
// manifest by ref, and blobs/sha256/<hex> for the manifest, the config and
// each layer. Entries are sorted and carry fixed timestamps, so the file is
// byte-identical for the same image. ref is the full name ("repo:tag"); the
// index carries it as io.containerd.image.name so that `ctr images import`
// (and `kind load image-archive`, which runs it) stores the image under that
// name with the same manifest digest.
func WriteArchive(path string, img v1.Image, ref, tag string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeLayout(tmp, img, ref, tag); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// archiveTime is the timestamp of every archive entry: the archive is a
// container for blobs whose digests are the identity, so it carries none.
var archiveTime = time.Unix(0, 0).UTC()

func writeLayout(w io.Writer, img v1.Image, ref, tag string) error {
	tw := tar.NewWriter(w)
	add := func(name string, size int64, r io.Reader) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		if _, err := io.Copy(tw, r); err != nil {
			return fmt.Errorf("archive entry %s: %w", name, err)
		}
		return nil
	}
	addBytes := func(name string, b []byte) error { return add(name, int64(len(b)), bytes.NewReader(b)) }
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: archiveTime, Format: tar.FormatPAX})
	}

	manifest, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("config digest: %w", err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{
				containerdNameAnnotation: ref,
				refNameAnnotation:        tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return fmt.Errorf("index.json: %w", err)
	}

	// Blobs in digest order, each once (two layers may be equal).
	blobs := map[string]func() error{
		digest.Hex:  func() error { return addBytes("blobs/sha256/"+digest.Hex, manifest) },
		cfgName.Hex: func() error { return addBytes("blobs/sha256/"+cfgName.Hex, cfg) },
	}
	for _, l := range layers {
		l := l
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("layer digest: %w", err)
		}
		size, err := l.Size()
		if err != nil {
			return fmt.Errorf("layer size: %w", err)
		}
		blobs[d.Hex] = func() error {
			rc, err := l.Compressed()
			if err != nil {
				return fmt.Errorf("layer %s: %w", d, err)
			}
			defer rc.Close()
			return add("blobs/sha256/"+d.Hex, size, rc)
		}
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := dir(d); err != nil {
			return fmt.Errorf("archive entry %s: %w", d, err)
		}
	}
	hexes := make(map[string]string, len(blobs))
	for h := range blobs {
		hexes[h] = h
	}
	for _, h := range sortedKeys(hexes) {
		if err := blobs[h](); err != nil {
			return err
		}
	}
	if err := addBytes("index.json", indexJSON); err != nil {
		return err
	}
	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}
