package images

import (
	"context"
	"fmt"

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
// hostNetwork, when the pod spec adds NET_BIND_SERVICE; without that the
// capability is not in the bounding set and the file grants nothing.
const backendUser = "65532:65532"

// pathEnv is the PATH of both images; iptables lives in /usr/sbin.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Built is an image and the name it is written under.
type Built struct {
	Name  string // FrontendName or BackendName
	Ref   string // <registry>/<name>:<tag>
	Tag   string
	Image v1.Image
}

// Frontend builds nodedns-frontend: the Debian base (iptables-legacy and
// iptables-nft, see base.go) and /usr/local/bin/nodedns-frontend, run as
// root (netlink and iptables; the chart grants NET_ADMIN, NET_RAW and
// NET_BIND_SERVICE and drops the rest).
func Frontend(ctx context.Context, t Tree, registry string, logf func(string, ...any)) (Built, error) {
	base, err := DebianBase(ctx, logf)
	if err != nil {
		return Built{}, err
	}
	bin, err := t.GoBuild(ctx, "./frontend")
	if err != nil {
		return Built{}, err
	}
	return t.image(registry, FrontendName, []v1.Layer{base}, bin, "", nil)
}

// Backend builds nodedns-backend: /usr/local/bin/nodedns-backend alone (a
// static binary that embeds its default Corefile; the chart mounts one and
// passes -conf), as uid and gid 65532, with the file capability
// cap_net_bind_service=+ep.
func Backend(ctx context.Context, t Tree, registry string) (Built, error) {
	bin, err := t.GoBuild(ctx, "./backend")
	if err != nil {
		return Built{}, err
	}
	caps, err := FileCapabilities(CapNetBindService)
	if err != nil {
		return Built{}, err
	}
	return t.image(registry, BackendName, nil, bin, backendUser, map[string][]byte{XattrCapability: caps})
}

func (t Tree) image(registry, name string, base []v1.Layer, bin []byte, user string, xattrs map[string][]byte) (Built, error) {
	exe := "/usr/local/bin/" + name
	binLayer, err := FilesLayer([]File{{Path: exe, Data: bin, Mode: 0o755, Xattrs: xattrs}}, t.Epoch)
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", name, err)
	}
	img, err := Build(Spec{
		Layers:     append(append([]v1.Layer(nil), base...), binLayer),
		Entrypoint: []string{exe},
		Env:        []string{pathEnv},
		User:       user,
		Created:    t.Epoch,
		Labels: map[string]string{
			LabelSource:   t.Source,
			LabelRevision: t.Revision,
			LabelVersion:  t.Version,
			LabelCreated:  t.Epoch.Format("2006-01-02T15:04:05Z"),
			LabelTitle:    name,
		},
	})
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", name, err)
	}
	return Built{Name: name, Ref: registry + "/" + name + ":" + t.Version, Tag: t.Version, Image: img}, nil
}
