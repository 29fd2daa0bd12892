package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
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
func WriteArchive(path string, img v1.Image, ref, tag string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("write %s: config: %w", path, err)
	}
	b := blobSet{}
	desc, err := b.addImage(img)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	desc.Platform = &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
	return writeArchiveFile(path, b, desc, ref, tag)
}

// WriteIndexArchive writes idx and every image it lists as an OCI image
// layout in a tar file at path, as WriteArchive does for one image:
// index.json names the image index by ref, and containerd imports it under
// that name with the index's digest, the one a registry serves.
func WriteIndexArchive(path string, idx v1.ImageIndex, ref, tag string) error {
	b := blobSet{}
	desc, err := b.addIndex(idx)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return writeArchiveFile(path, b, desc, ref, tag)
}

func writeArchiveFile(path string, b blobSet, root v1.Descriptor, ref, tag string) (err error) {
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
	root.Annotations = map[string]string{containerdNameAnnotation: ref, refNameAnnotation: tag}
	if err := writeLayout(tmp, b, root); err != nil {
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

// blob is one content-addressed file of a layout.
type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

// blobSet holds a layout's blobs by digest hex; a blob shared by two
// images (a layer, a config) is written once.
type blobSet map[string]blob

func (b blobSet) addBytes(d v1.Hash, data []byte) {
	b[d.Hex] = blob{size: int64(len(data)), open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// addImage adds an image's manifest, config and layers and returns the
// manifest's descriptor.
func (b blobSet) addImage(img v1.Image) (v1.Descriptor, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest: %w", err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("media type: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("config digest: %w", err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("layers: %w", err)
	}
	b.addBytes(digest, manifest)
	b.addBytes(cfgName, cfg)
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("layer digest: %w", err)
		}
		size, err := l.Size()
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("layer size: %w", err)
		}
		b[d.Hex] = blob{size: size, open: l.Compressed}
	}
	return v1.Descriptor{MediaType: mt, Size: int64(len(manifest)), Digest: digest}, nil
}

// addIndex adds an index and every image it lists, and returns the
// index's descriptor.
func (b blobSet) addIndex(idx v1.ImageIndex) (v1.Descriptor, error) {
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("index: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("index digest: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("index: %w", err)
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("index entry %s: %w", d.Digest, err)
		}
		if _, err := b.addImage(img); err != nil {
			return v1.Descriptor{}, fmt.Errorf("index entry %s: %w", d.Digest, err)
		}
	}
	b.addBytes(digest, raw)
	return v1.Descriptor{MediaType: types.OCIImageIndex, Size: int64(len(raw)), Digest: digest}, nil
}

func writeLayout(w io.Writer, b blobSet, root v1.Descriptor) error {
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
	addBytes := func(name string, data []byte) error { return add(name, int64(len(data)), bytes.NewReader(data)) }
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("archive entry %s: %w", d, err)
		}
	}
	// Blobs in digest order, each once.
	hexes := make([]string, 0, len(b))
	for h := range b {
		hexes = append(hexes, h)
	}
	sort.Strings(hexes)
	for _, h := range hexes {
		rc, err := b[h].open()
		if err != nil {
			return fmt.Errorf("blob %s: %w", h, err)
		}
		err = add("blobs/sha256/"+h, b[h].size, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	indexJSON, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{root}})
	if err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	if err := addBytes("index.json", indexJSON); err != nil {
		return err
	}
	if err := addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}
