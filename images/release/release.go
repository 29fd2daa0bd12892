// Package release publishes nodedns: the multi-architecture image indexes
// of nodedns-frontend and nodedns-backend and the Helm chart as an OCI
// artifact, all under one registry prefix and one version (`make
// release`).
package release

import (
	"context"
	"fmt"
	"io"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/nodedns/nodedns/images"
)

// Options selects what Publish pushes where.
type Options struct {
	// Registry is the repository prefix: the images go to
	// <Registry>/nodedns-frontend and <Registry>/nodedns-backend, the
	// chart to oci://<Registry>/nodedns.
	Registry string
	// PlainHTTP talks HTTP instead of HTTPS; a registry on the loopback
	// is always reached over HTTP (images.PlainHTTP).
	PlainHTTP bool
	// Archs are the architectures (default images.Architectures).
	Archs []string
	// Logf receives progress.
	Logf func(string, ...any)
}

// Result is what a release pushed.
type Result struct {
	Images []Image
	// Chart is the chart's reference, "oci://<registry>/nodedns:<version>",
	// and ChartDigest its manifest's digest.
	Chart       string
	ChartDigest string
}

// Image is one pushed image index.
type Image struct {
	Ref    string  // <registry>/<name>:<version>
	Digest v1.Hash // the index's digest
	// Platforms are its images, each with its sizes.
	Platforms []images.Summary
	Archs     []string
}

// Publish builds both images for every architecture of opts from tree
// (tree.Version is the version), pushes their indexes, then packages the
// chart for the same version and registry and pushes it.
func Publish(ctx context.Context, tree images.Tree, opts Options) (Result, error) {
	if opts.Registry == "" || strings.Contains(opts.Registry, "://") {
		return Result{}, fmt.Errorf("registry %q: want a repository prefix such as ghcr.io/owner", opts.Registry)
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	plain := opts.PlainHTTP || images.PlainHTTP(opts.Registry)
	// The chart first: a version that is no SemVer fails before any push.
	chartData, _, err := PackageChart(opts.Registry, tree.Version)
	if err != nil {
		return Result{}, err
	}
	var res Result
	for _, name := range []string{images.FrontendName, images.BackendName} {
		b, err := images.BuildImage(ctx, tree, opts.Registry, name, opts.Archs, opts.Logf)
		if err != nil {
			return Result{}, err
		}
		img, err := Summarize(b)
		if err != nil {
			return Result{}, err
		}
		if err := images.PushIndex(ctx, b.Ref, b.Index, plain); err != nil {
			return Result{}, err
		}
		res.Images = append(res.Images, img)
	}
	res.Chart = "oci://" + opts.Registry + "/" + ChartName + ":" + tree.Version
	if res.ChartDigest, err = PushChart(chartData, opts.Registry, tree.Version, plain); err != nil {
		return Result{}, err
	}
	return res, nil
}

// Summarize gives an index's digest and each platform's digest and sizes.
func Summarize(b images.Built) (Image, error) {
	d, err := b.Index.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("index of %s: %w", b.Ref, err)
	}
	img := Image{Ref: b.Ref, Digest: d}
	for _, p := range b.Platforms {
		s, err := images.Summarize(b.Ref, p.Image)
		if err != nil {
			return Image{}, err
		}
		img.Platforms = append(img.Platforms, s)
		img.Archs = append(img.Archs, p.Arch)
	}
	return img, nil
}

// PushChart pushes a packaged chart to oci://<registry>/nodedns:<version>
// with Helm's registry client (credentials as `helm registry login` or
// `docker login` stored them) and returns the manifest's digest.
func PushChart(data []byte, registryPrefix, version string, plainHTTP bool) (string, error) {
	c, err := NewRegistryClient(plainHTTP)
	if err != nil {
		return "", err
	}
	ref := registryPrefix + "/" + ChartName + ":" + version
	r, err := c.Push(data, ref, registry.PushOptStrictMode(true))
	if err != nil {
		return "", fmt.Errorf("push chart %s: %w", ref, err)
	}
	return r.Manifest.Digest, nil
}

// NewRegistryClient returns Helm's registry client, over plain HTTP when
// asked.
func NewRegistryClient(plainHTTP bool) (*registry.Client, error) {
	var opts []registry.ClientOption
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("helm registry client: %w", err)
	}
	return c, nil
}

// Print writes the release as `make release` shows it: each index with
// its digest, then each platform's digest and sizes, then the chart.
func (r Result) Print(w io.Writer) {
	for _, img := range r.Images {
		fmt.Fprintf(w, "%s@%s (index: %s)\n", img.Ref, img.Digest, strings.Join(platformNames(img.Archs), ", "))
		for i, s := range img.Platforms {
			fmt.Fprintf(w, "  %-12s %s %7.1f MiB compressed %7.1f MiB uncompressed\n", "linux/"+img.Archs[i], s.Digest, mib(s.Compressed), mib(s.Uncompressed))
		}
	}
	fmt.Fprintf(w, "chart %s@%s\n", r.Chart, r.ChartDigest)
}

func platformNames(archs []string) []string {
	out := make([]string, len(archs))
	for i, a := range archs {
		out[i] = "linux/" + a
	}
	return out
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
