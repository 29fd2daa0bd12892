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
	"sort"
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
}

// Build assembles the image of spec for linux/amd64 with OCI media types.
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
	cf.Architecture = "amd64"
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

// sortedKeys returns m's keys in order, for deterministic output.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
