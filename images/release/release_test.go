package release

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
)

// testVersion is the version the test releases: SemVer, as a chart's
// version must be.
const testVersion = "1.2.3-test.1"

// startRegistry runs go-containerregistry's registry in process on
// 127.0.0.1:0 and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func readTree(t *testing.T, version string) images.Tree {
	t.Helper()
	root, err := images.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := images.ReadTree(context.Background(), root, version)
	if err != nil {
		t.Fatalf("no git tree to build from: %v", err)
	}
	return tree
}

// TestRelease publishes to a registry started here and reads everything
// back: both indexes list linux/amd64 and linux/arm64; the arm64 image's
// manifest and config say arm64 and its binary is an arm64 ELF file; the
// chart pulled back has version = appVersion = the release's version and
// renders images from this registry with that tag; and a second build of
// the same tree, from fresh go builds, gives the digests the registry
// holds.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds both images for two architectures")
	}
	ctx := context.Background()
	prefix := startRegistry(t) + "/nodedns"
	start := time.Now()
	res, err := Publish(ctx, readTree(t, testVersion), Options{Registry: prefix, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("released in %s:\n%s", time.Since(start).Round(time.Millisecond), out.String())

	for _, img := range res.Images {
		for _, want := range []string{img.Ref + "@" + img.Digest.String(), "linux/amd64", "linux/arm64"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("printed release lacks %q", want)
			}
		}
	}
	if want := "chart oci://" + prefix + "/nodedns:" + testVersion + "@sha256:"; !strings.Contains(out.String(), want) {
		t.Errorf("printed release lacks %q", want)
	}

	for _, img := range res.Images {
		checkPushedIndex(t, img)
	}
	checkPulledChart(t, prefix)

	// Another build, with binaries compiled again, gives what was pushed.
	again := readTree(t, testVersion)
	for _, img := range res.Images {
		imgName := strings.TrimSuffix(img.Ref[strings.LastIndex(img.Ref, "/")+1:], ":"+testVersion)
		b, err := images.BuildImage(ctx, again, prefix, imgName, images.Architectures, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := b.Index.Digest(); d != img.Digest {
			t.Errorf("%s: rebuilt index %s, registry holds %s", img.Ref, d, img.Digest)
		}
	}
}

// checkPushedIndex reads img's index from the registry and checks each
// platform's manifest, config and binary.
func checkPushedIndex(t *testing.T, img Image) {
	t.Helper()
	ref, err := name.ParseReference(img.Ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("%s: %v", img.Ref, err)
	}
	if d, _ := idx.Digest(); d != img.Digest {
		t.Errorf("%s: registry serves index %s, release printed %s", img.Ref, d, img.Digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("%s: index entry %s has no platform", img.Ref, d.Digest)
		}
		archs = append(archs, d.Platform.OS+"/"+d.Platform.Architecture)
		pimg, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := pimg.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s %s: config says %s/%s", img.Ref, d.Digest, cf.OS, cf.Architecture)
		}
		if cf.Config.Labels[images.LabelVersion] != testVersion {
			t.Errorf("%s %s: label %s=%q, want %q", img.Ref, d.Digest, images.LabelVersion, cf.Config.Labels[images.LabelVersion], testVersion)
		}
		m, err := pimg.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Config.Digest.String() == "" || len(m.Layers) == 0 {
			t.Errorf("%s %s: manifest without config or layers", img.Ref, d.Digest)
		}
		checkELF(t, img.Ref, pimg, cf.Config.Entrypoint[0], d.Platform.Architecture)
	}
	if got := strings.Join(archs, " "); got != "linux/amd64 linux/arm64" {
		t.Errorf("%s: index lists %s, want linux/amd64 linux/arm64", img.Ref, got)
	}
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkELF wants the file at exe in img's last layer to be an ELF
// executable for arch.
func checkELF(t *testing.T, ref string, img v1.Image, exe, arch string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s linux/%s: no %s", ref, arch, exe)
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+h.Name != exe {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s linux/%s: %s is no ELF file: %v", ref, arch, exe, err)
		}
		if f.Machine != elfMachine[arch] {
			t.Errorf("%s linux/%s: %s is for %s, want %s", ref, arch, exe, f.Machine, elfMachine[arch])
		}
		return
	}
}

// checkPulledChart pulls the chart back with Helm's registry client and
// renders it as `helm template` does: its defaults with the values a
// rendering without a cluster needs (helm.WithoutCluster).
func checkPulledChart(t *testing.T, prefix string) {
	t.Helper()
	c, err := NewRegistryClient(true)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := c.Pull(prefix + "/nodedns:" + testVersion)
	if err != nil {
		t.Fatalf("pull the chart: %v", err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
	if err != nil {
		t.Fatalf("load the pulled chart: %v", err)
	}
	if ch.Metadata.Version != testVersion || ch.Metadata.AppVersion != testVersion {
		t.Errorf("pulled chart: version %q appVersion %q, want %q for both", ch.Metadata.Version, ch.Metadata.AppVersion, testVersion)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion("v1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	caps.KubeVersion = *kv
	vals, err := chartutil.ToRenderValues(ch, helm.WithoutCluster(nil), chartutil.ReleaseOptions{Name: "nodedns", Namespace: "kube-system", Revision: 1, IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("render the pulled chart: %v", err)
	}
	var all strings.Builder
	for _, s := range out {
		all.WriteString(s)
	}
	for _, n := range []string{images.FrontendName, images.BackendName} {
		want := prefix + "/" + n + ":" + testVersion
		if !strings.Contains(all.String(), want) {
			t.Errorf("the pulled chart's defaults render no image %s", want)
		}
	}
	if strings.Contains(all.String(), images.DefaultRegistry+"/") {
		t.Errorf("the pulled chart still renders images from %s", images.DefaultRegistry)
	}
}
