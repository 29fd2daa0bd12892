package images

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push uploads img to the registry named by ref ("host/repo:tag") with the
// credentials of the Docker config (~/.docker/config.json, as `docker
// login` and `crane auth login` write it). insecure allows plain HTTP, for
// a registry on localhost.
func Push(ctx context.Context, ref string, img v1.Image, insecure bool) error {
	r, err := parseRef(ref, insecure)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// PushIndex uploads an image index and every image it lists, as Push does
// for one image.
func PushIndex(ctx context.Context, ref string, idx v1.ImageIndex, insecure bool) error {
	r, err := parseRef(ref, insecure)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

func parseRef(ref string, insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure || PlainHTTP(ref) {
		opts = append(opts, name.Insecure)
	}
	return name.ParseReference(ref, opts...)
}

// PlainHTTP reports whether ref's registry is on the loopback
// ("localhost:5000/x", "127.0.0.1:5000/x", "[::1]:5000/x"): such a
// registry is reached over plain HTTP, as Docker and containerd do.
func PlainHTTP(ref string) bool {
	host, _, _ := strings.Cut(strings.TrimPrefix(ref, "oci://"), "/")
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = strings.Trim(host, "[]")
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
