// Package images builds the nodedns container images without a Docker
// engine: OCI images assembled with go-containerregistry from layers this
// package writes itself (sorted entries, fixed timestamps, owners and modes),
// so the same tree gives the same digests, and written as OCI image archives
// that `ctr images import` and `kind load image-archive` accept.
//
// What goes into each image is defined once, in specs.go; the command
// images/cmd/nodedns-images (`make images`) builds and writes them.
package images

import (
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI annotation and label keys (OCI image spec, annotations.md).
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
	LabelCreated  = "org.opencontainers.image.created"
	LabelTitle    = "org.opencontainers.image.title"
	// refNameAnnotation names a manifest in an OCI layout's index.json.
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// containerdNameAnnotation gives containerd's importer (ctr images
	// import, kind load image-archive) the full image name to store.
	containerdNameAnnotation = "io.containerd.image.name"
)

// Spec describes one image: an ordered list of layers on an empty base, and
// the runtime configuration. Every field is data, so two builds of the same
// Spec give the same digest.
type Spec struct {
	// Layers, lowest first. Each becomes one gzip layer.
	Layers []v1.Layer
	// Entrypoint is the image's ENTRYPOINT; Cmd its default arguments.
	Entrypoint []string
	Cmd        []string
	// Env is the environment, "KEY=value".
	Env []string
	// User is "uid:gid", or "" for root.
	User string
	// Labels go into the image configuration and, as annotations, into the
	// manifest.
	Labels map[string]string
	// Created is the creation time recorded in the configuration and the
	// history: SOURCE_DATE_EPOCH, never the build's wall clock.
	Created time.Time
	// Architecture is the GOARCH the image runs on (OS linux); default
	// amd64.
	Architecture string
}

// Build assembles the image of spec for linux/<spec.Architecture> with OCI
// media types.
func Build(spec Spec) (v1.Image, error) {
	created := v1.Time{Time: spec.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(spec.Layers))
	for _, l := range spec.Layers {
		adds = append(adds, mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: created, CreatedBy: "nodedns images"},
		})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = spec.Architecture
	if cf.Architecture == "" {
		cf.Architecture = "amd64"
	}
	cf.OS = "linux"
	cf.Created = created
	cf.Config = v1.Config{
		Entrypoint: spec.Entrypoint,
		Cmd:        spec.Cmd,
		Env:        spec.Env,
		User:       spec.User,
		Labels:     spec.Labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("set image config: %w", err)
	}
	if len(spec.Labels) > 0 {
		anns := make(map[string]string, len(spec.Labels))
		for k, v := range spec.Labels {
			anns[k] = v
		}
		img = mutate.Annotations(img, anns).(v1.Image)
	}
	return img, nil
}

// Index makes an OCI image index of platforms, each entry carrying its
// platform (linux/<arch>), with annotations.
func Index(platforms []Platform, annotations map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for _, p := range platforms {
		adds = append(adds, mutate.IndexAddendum{
			Add: p.Image,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: "linux", Architecture: p.Arch},
			},
		})
	}
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	if _, err := idx.Digest(); err != nil {
		return nil, fmt.Errorf("image index: %w", err)
	}
	return idx, nil
}

// Summary is what `make images` prints for an image.
type Summary struct {
	Ref    string  // name:tag
	Digest v1.Hash // manifest digest, as a registry and containerd report it
	// Compressed is the sum of the layer blobs, what a pull downloads;
	// Uncompressed the sum of the layers' tar sizes, what a node unpacks.
	Compressed, Uncompressed int64
	Layers                   int
}

// Summarize computes img's digest and sizes.
func Summarize(ref string, img v1.Image) (Summary, error) {
	s := Summary{Ref: ref}
	var err error
	if s.Digest, err = img.Digest(); err != nil {
		return s, fmt.Errorf("digest of %s: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return s, fmt.Errorf("layers of %s: %w", ref, err)
	}
	s.Layers = len(layers)
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, fmt.Errorf("layer size of %s: %w", ref, err)
		}
		s.Compressed += n
		u, err := uncompressedSize(l)
		if err != nil {
			return s, fmt.Errorf("layer of %s: %w", ref, err)
		}
		s.Uncompressed += u
	}
	return s, nil
}
