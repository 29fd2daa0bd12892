package images

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultRegistry is the repository prefix of the images' names, the one
// the chart's values.yaml names.
const DefaultRegistry = "ghcr.io/nodedns"

// Image names, as the chart's image.frontend.repository and
// image.backend.repository name them under DefaultRegistry.
const (
	FrontendName = "nodedns-frontend"
	BackendName  = "nodedns-backend"
)

// backendUser is distroless's "nonroot". The backend's binary carries the
// file capability cap_net_bind_service=+ep (as CoreDNS's own image does),
// so that a Corefile may serve port 53, e.g. on the node's IP with
// hostNetwork. The pod spec must add NET_BIND_SERVICE: the effective bit
// makes the kernel refuse to execve the binary (EPERM) when the bounding
// set lacks a capability the file forces, as it does CoreDNS's.
const backendUser = "65532:65532"

// pathEnv is the PATH of both images; iptables lives in /usr/sbin.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Built is an image, for one or more architectures, and the name it is
// written under.
type Built struct {
	Name string // FrontendName or BackendName
	Ref  string // <registry>/<name>:<tag>
	Tag  string
	// Image is the linux/amd64 image when built, else the first of
	// Platforms: what a single-platform archive holds.
	Image v1.Image
	// Platforms are the images by architecture, in Architectures order.
	Platforms []Platform
	// Index lists Platforms (an OCI image index), what a registry serves
	// under Ref and a multi-platform archive holds.
	Index v1.ImageIndex
}

// Platform is one architecture's image.
type Platform struct {
	Arch  string // GOARCH; the OS is linux
	Image v1.Image
}

// Frontend builds nodedns-frontend for linux/amd64 (BuildImage).
func Frontend(ctx context.Context, t Tree, registry string, logf func(string, ...any)) (Built, error) {
	return BuildImage(ctx, t, registry, FrontendName, []string{"amd64"}, logf)
}

// Backend builds nodedns-backend for linux/amd64 (BuildImage).
func Backend(ctx context.Context, t Tree, registry string) (Built, error) {
	return BuildImage(ctx, t, registry, BackendName, []string{"amd64"}, func(string, ...any) {})
}

// BuildImage builds image name (FrontendName or BackendName) for each of
// archs and an index of them. The definitions:
//
//   - nodedns-frontend: the Debian base of that architecture (iptables-legacy
//     and iptables-nft, see base.go) and /usr/local/bin/nodedns-frontend, run
//     as root (netlink and iptables; the chart grants NET_ADMIN, NET_RAW and
//     NET_BIND_SERVICE and drops the rest).
//   - nodedns-backend: /usr/local/bin/nodedns-backend alone (a static binary
//     that embeds its default Corefile; the chart mounts one and passes
//     -conf), as uid and gid 65532, with the file capability
//     cap_net_bind_service=+ep.
func BuildImage(ctx context.Context, t Tree, registry, name string, archs []string, logf func(string, ...any)) (Built, error) {
	if len(archs) == 0 {
		archs = Architectures
	}
	for _, arch := range archs {
		if !slices.Contains(Architectures, arch) {
			return Built{}, fmt.Errorf("image %s: architecture %q: want one of %s", name, arch, strings.Join(Architectures, ", "))
		}
	}
	b := Built{Name: name, Ref: registry + "/" + name + ":" + t.Version, Tag: t.Version}
	for _, arch := range archs {
		var img v1.Image
		var err error
		switch name {
		case FrontendName:
			img, err = t.frontend(ctx, arch, logf)
		case BackendName:
			img, err = t.backend(ctx, arch)
		default:
			err = fmt.Errorf("no image %q (want %s or %s)", name, FrontendName, BackendName)
		}
		if err != nil {
			return Built{}, err
		}
		b.Platforms = append(b.Platforms, Platform{Arch: arch, Image: img})
		if b.Image == nil || arch == "amd64" {
			b.Image = img
		}
	}
	idx, err := Index(b.Platforms, t.labels(name))
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", name, err)
	}
	b.Index = idx
	return b, nil
}

func (t Tree) frontend(ctx context.Context, arch string, logf func(string, ...any)) (v1.Image, error) {
	base, err := DebianBaseFor(ctx, arch, logf)
	if err != nil {
		return nil, err
	}
	bin, err := t.GoBuildFor(ctx, "./frontend", arch)
	if err != nil {
		return nil, err
	}
	return t.image(FrontendName, arch, []v1.Layer{base}, bin, "", nil)
}

func (t Tree) backend(ctx context.Context, arch string) (v1.Image, error) {
	bin, err := t.GoBuildFor(ctx, "./backend", arch)
	if err != nil {
		return nil, err
	}
	caps, err := FileCapabilities(CapNetBindService)
	if err != nil {
		return nil, err
	}
	return t.image(BackendName, arch, nil, bin, backendUser, map[string][]byte{XattrCapability: caps})
}

// labels are the OCI labels of image name, in its configuration and as
// annotations of its manifest and index.
func (t Tree) labels(name string) map[string]string {
	return map[string]string{
		LabelSource:   t.Source,
		LabelRevision: t.Revision,
		LabelVersion:  t.Version,
		LabelCreated:  t.Epoch.Format("2006-01-02T15:04:05Z"),
		LabelTitle:    name,
	}
}

func (t Tree) image(name, arch string, base []v1.Layer, bin []byte, user string, xattrs map[string][]byte) (v1.Image, error) {
	exe := "/usr/local/bin/" + name
	binLayer, err := FilesLayer([]File{{Path: exe, Data: bin, Mode: 0o755, Xattrs: xattrs}}, t.Epoch)
	if err != nil {
		return nil, fmt.Errorf("image %s for %s: %w", name, arch, err)
	}
	img, err := Build(Spec{
		Layers:       append(append([]v1.Layer(nil), base...), binLayer),
		Entrypoint:   []string{exe},
		Env:          []string{pathEnv},
		User:         user,
		Created:      t.Epoch,
		Architecture: arch,
		Labels:       t.labels(name),
	})
	if err != nil {
		return nil, fmt.Errorf("image %s for %s: %w", name, arch, err)
	}
	return img, nil
}
