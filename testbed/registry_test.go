package testbed

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	helmregistry "helm.sh/helm/v3/pkg/registry"

	"github.com/nodedns/nodedns/images"
)

// startLoopbackRegistry is newRegistry with both listeners on loopback:
// the handler, storage and request log without network namespaces (no
// root).
func startLoopbackRegistry(t *testing.T) *Registry {
	t.Helper()
	var lns []net.Listener
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
	}
	r, err := newRegistry(t.TempDir(), lns[0], lns[1], lns[1].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func testImage(t *testing.T, content string) v1.Image {
	t.Helper()
	layer, err := images.FilesLayer([]images.File{{Path: "marker", Data: []byte(content), Mode: 0o644}}, podToolEpoch)
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Build(images.Spec{Layers: []v1.Layer{layer}, Entrypoint: []string{"/marker"}, Created: podToolEpoch})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestRegistryListenersShareStorage pushes through Host and pulls through
// NodeHost: one store behind both, blobs on disk in Dir, and each request
// logged with the listener it came in on.
func TestRegistryListenersShareStorage(t *testing.T) {
	r := startLoopbackRegistry(t)
	img := testImage(t, "shared")
	ref, err := name.ParseReference(r.Ref("nodedns-test/shared:v1"), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(context.Background())); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	viaNodes, err := name.ParseReference(r.NodeHost+"/nodedns-test/shared@"+digest.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(viaNodes)
	if err != nil {
		t.Fatal(err)
	}
	if gd, _ := got.Digest(); gd != digest {
		t.Errorf("NodeHost serves %s, pushed %s", gd, digest)
	}
	layers, _ := got.Layers()
	ld, _ := layers[0].Digest()
	rc, err := layers[0].Compressed() // GET /v2/.../blobs/<digest>
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := os.Stat(filepath.Join(r.Dir, "blobs", ld.Algorithm, ld.Hex)); err != nil {
		t.Errorf("layer blob not on disk: %v", err)
	}

	want := []RegistryRequest{
		{FromNodes: false, Method: "PUT", Path: "/v2/nodedns-test/shared/manifests/v1", Status: 201},
		{FromNodes: true, Method: "GET", Path: "/v2/nodedns-test/shared/manifests/" + digest.String(), Status: 200},
		{FromNodes: true, Method: "GET", Path: "/v2/nodedns-test/shared/blobs/" + ld.String(), Status: 200},
	}
	reqs := r.Requests()
	for _, w := range want {
		if !containsRequest(reqs, w) {
			t.Errorf("request log lacks %+v:\n%s", w, requestLines(reqs))
		}
	}
	for _, q := range reqs {
		if q.FromNodes && q.Method == "PUT" {
			t.Errorf("a push logged as from nodes: %+v", q)
		}
	}
}

// TestPushArchive pushes an archive images.WriteArchive wrote: the same
// digest arrives, by the reference PushArchive returns.
func TestPushArchive(t *testing.T) {
	r := startLoopbackRegistry(t)
	img := testImage(t, "archive")
	path := filepath.Join(t.TempDir(), "a.oci.tar")
	if err := images.WriteArchive(path, img, "nodedns.test/a:v1", "v1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := r.PushArchive(ctx, Archive{Path: path}, "nodedns-test/a:v1")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if want := r.Host + "/nodedns-test/a@" + d.String(); got != want {
		t.Errorf("PushArchive = %s, want %s", got, want)
	}
	tagged, _ := name.ParseReference(r.Ref("nodedns-test/a:v1"), name.Insecure)
	desc, err := remote.Head(tagged)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != d {
		t.Errorf("tag v1 is %s, want %s", desc.Digest, d)
	}
	if _, err := r.PushArchive(ctx, Archive{Path: path + ".missing"}, "nodedns-test/a:v1"); err == nil {
		t.Error("PushArchive of a missing file: no error")
	}

	// An archive of a multi-arch index: the index goes, with both images.
	arm := withArch(t, testImage(t, "arm64"), "arm64")
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	indexPath := writeIndexArchive(t, idx)
	got, err = r.PushArchive(ctx, Archive{Path: indexPath}, "nodedns-test/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := idx.Digest()
	if want := r.Host + "/nodedns-test/multi@" + id.String(); got != want {
		t.Errorf("PushArchive of an index = %s, want %s", got, want)
	}
	armDigest, _ := arm.Digest()
	armRef, _ := name.ParseReference(r.Host+"/nodedns-test/multi@"+armDigest.String(), name.Insecure)
	if _, err := remote.Image(armRef); err != nil {
		t.Errorf("the index's arm64 image was not pushed: %v", err)
	}
}

// withArch returns img with its configuration's architecture set to arch.
func withArch(t *testing.T, img v1.Image, arch string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = arch
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeIndexArchive writes idx as an OCI image layout whose index.json
// names idx, in a tar file, and returns its path.
func writeIndexArchive(t *testing.T, idx v1.ImageIndex) string {
	t.Helper()
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "index.oci.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	root := filepath.Join(dir, "layout")
	err = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestContainerdRegistryConfig parses the containerd config and the
// hosts.toml of a registry that a node gets.
func TestContainerdRegistryConfig(t *testing.T) {
	n := &RealNode{Dir: "/nodes/a"}
	var cfg struct {
		Plugins map[string]struct {
			SandboxImage string `toml:"sandbox_image"`
			Registry     struct {
				ConfigPath string `toml:"config_path"`
			} `toml:"registry"`
		} `toml:"plugins"`
	}
	if _, err := toml.Decode(n.containerdConfig(), &cfg); err != nil {
		t.Fatalf("containerd.toml: %v", err)
	}
	cri := cfg.Plugins["io.containerd.grpc.v1.cri"]
	if cri.SandboxImage != PauseImage {
		t.Errorf("sandbox_image = %q, want %q", cri.SandboxImage, PauseImage)
	}
	if want := "/nodes/a/containerd/certs.d"; cri.Registry.ConfigPath != want {
		t.Errorf("registry.config_path = %q, want %q", cri.Registry.ConfigPath, want)
	}

	r := &Registry{Host: "127.0.0.1:40123", NodeHost: NodeGateway + ":40123"}
	var hosts struct {
		Server string `toml:"server"`
		Host   map[string]struct {
			Capabilities []string `toml:"capabilities"`
		} `toml:"host"`
	}
	if _, err := toml.Decode(hostsTOML(r), &hosts); err != nil {
		t.Fatalf("hosts.toml: %v", err)
	}
	if hosts.Server != "" {
		t.Errorf("hosts.toml has server %q: a pull could bypass the mirror", hosts.Server)
	}
	want := map[string][]string{"http://" + NodeGateway + ":40123": {"pull", "resolve"}}
	got := map[string][]string{}
	for h, c := range hosts.Host {
		got[h] = c.Capabilities
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hosts.toml hosts = %v, want %v", got, want)
	}
}

func containsRequest(reqs []RegistryRequest, w RegistryRequest) bool {
	for _, q := range reqs {
		if q == w {
			return true
		}
	}
	return false
}

func requestLines(reqs []RegistryRequest) string {
	var b strings.Builder
	for _, q := range reqs {
		from := "test"
		if q.FromNodes {
			from = "nodes"
		}
		fmt.Fprintf(&b, "%s %s %s %d\n", from, q.Method, q.Path, q.Status)
	}
	return b.String()
}

// TestRegistryServesHelmCharts pushes a chart with Helm's registry client
// (what `helm push` runs) and pulls it back (what `helm install
// oci://HOST/...` runs first): the registry holds OCI artifacts as well as
// images.
func TestRegistryServesHelmCharts(t *testing.T) {
	r := startLoopbackRegistry(t)
	c := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "hello", Version: "0.1.0", AppVersion: "0.1.0", Type: "application"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello}\n")}},
	}
	dir := t.TempDir()
	path, err := chartutil.Save(c, dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptCredentialsFile(filepath.Join(dir, "credentials.json")))
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Ref("charts/hello:0.1.0")
	pushed, err := client.Push(data, ref)
	if err != nil {
		t.Fatalf("helm push %s: %v", ref, err)
	}
	pulled, err := client.Pull(ref)
	if err != nil {
		t.Fatalf("helm pull %s: %v", ref, err)
	}
	if pulled.Manifest.Digest != pushed.Manifest.Digest || !bytes.Equal(pulled.Chart.Data, data) {
		t.Errorf("pulled manifest %s (%d chart bytes), pushed %s (%d bytes)", pulled.Manifest.Digest, len(pulled.Chart.Data), pushed.Manifest.Digest, len(data))
	}
	if pulled.Chart.Meta.Version != "0.1.0" {
		t.Errorf("pulled chart version %q, want 0.1.0", pulled.Chart.Meta.Version)
	}
}
