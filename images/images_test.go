package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func testTree(t *testing.T) Tree {
	t.Helper()
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := ReadTree(context.Background(), root, "")
	if err != nil {
		t.Skipf("no git tree to build from: %v", err)
	}
	return tree
}

// buildBoth builds both images and writes their archives into dir.
func buildBoth(t *testing.T, tree Tree, dir string) []Built {
	t.Helper()
	ctx := context.Background()
	fe, err := Frontend(ctx, tree, DefaultRegistry, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	be, err := Backend(ctx, tree, DefaultRegistry)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []Built{fe, be} {
		if err := WriteArchive(filepath.Join(dir, b.Name+".tar"), b.Image, b.Ref, b.Tag); err != nil {
			t.Fatal(err)
		}
	}
	return []Built{fe, be}
}

// TestImagesReproducible builds both images twice, from fresh go builds
// into separate directories, and wants the same manifest digests and
// byte-identical archives; then checks what each image declares.
func TestImagesReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds both binaries twice")
	}
	if r := BaseUnavailable(); r != "" {
		t.Skip("frontend image: " + r)
	}
	tree := testTree(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	var runs [][]Built
	for _, d := range dirs {
		start := time.Now()
		runs = append(runs, buildBoth(t, tree, d))
		t.Logf("built both images in %s", time.Since(start).Round(time.Millisecond))
	}
	for i := range runs[0] {
		a, b := runs[0][i], runs[1][i]
		da, _ := a.Image.Digest()
		db, _ := b.Image.Digest()
		if da != db {
			t.Errorf("%s: digests %s and %s from the same tree", a.Name, da, db)
		}
		fa, fb := fileSum(t, filepath.Join(dirs[0], a.Name+".tar")), fileSum(t, filepath.Join(dirs[1], b.Name+".tar"))
		if fa != fb {
			t.Errorf("%s: archives differ (sha256 %s and %s)", a.Name, fa, fb)
		}
		s, err := Summarize(a.Ref, a.Image)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s: %d layers, %.1f MiB compressed, %.1f MiB uncompressed", a.Ref, s.Digest, s.Layers, float64(s.Compressed)/(1<<20), float64(s.Uncompressed)/(1<<20))
	}

	want := map[string]struct {
		user   string
		layers int
	}{FrontendName: {"", 2}, BackendName: {backendUser, 1}}
	for _, b := range runs[0] {
		cf, err := b.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		w := want[b.Name]
		if cf.OS != "linux" || cf.Architecture != "amd64" {
			t.Errorf("%s: platform %s/%s, want linux/amd64", b.Name, cf.OS, cf.Architecture)
		}
		if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/"+b.Name {
			t.Errorf("%s: entrypoint %q", b.Name, got)
		}
		if cf.Config.User != w.user {
			t.Errorf("%s: user %q, want %q", b.Name, cf.Config.User, w.user)
		}
		if !cf.Created.Time.Equal(tree.Epoch) {
			t.Errorf("%s: created %s, want the commit time %s", b.Name, cf.Created.Time, tree.Epoch)
		}
		for k, v := range map[string]string{LabelSource: tree.Source, LabelRevision: tree.Revision, LabelVersion: tree.Version} {
			if cf.Config.Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", b.Name, k, cf.Config.Labels[k], v)
			}
		}
		m, err := b.Image.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Annotations[LabelRevision] != tree.Revision {
			t.Errorf("%s: manifest annotation %s=%q, want %q", b.Name, LabelRevision, m.Annotations[LabelRevision], tree.Revision)
		}
		if len(m.Layers) != w.layers {
			t.Errorf("%s: %d layers, want %d", b.Name, len(m.Layers), w.layers)
		}
		checkBinaryCaps(t, b)
		// The archive is an OCI layout go-containerregistry reads back.
		checkArchive(t, filepath.Join(dirs[0], b.Name+".tar"), b)
	}
	checkIPTablesInImage(t, runs[0][0].Image)
}

// checkBinaryCaps wants the backend's binary to carry
// cap_net_bind_service=+ep in its layer entry, and the frontend's none.
func checkBinaryCaps(t *testing.T, b Built) {
	t.Helper()
	layers, err := b.Image.Layers()
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
			t.Fatalf("%s: no usr/local/bin/%s in the last layer", b.Name, b.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "usr/local/bin/"+b.Name {
			continue
		}
		var want []byte
		if b.Name == BackendName {
			want, _ = FileCapabilities(CapNetBindService)
		}
		if got := h.PAXRecords[paxXattr+XattrCapability]; got != string(want) {
			t.Errorf("%s: binary's %s = % x, want % x", b.Name, XattrCapability, got, want)
		}
		return
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// checkArchive unpacks the archive and reads it as an OCI layout: one
// manifest, named for containerd, with the image's digest.
func checkArchive(t *testing.T, path string, b Built) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v: %s", path, err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI layout: %v", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", path, len(im.Manifests))
	}
	d := im.Manifests[0]
	want, _ := b.Image.Digest()
	if d.Digest != want {
		t.Errorf("%s: index names %s, want %s", path, d.Digest, want)
	}
	if d.Annotations[containerdNameAnnotation] != b.Ref {
		t.Errorf("%s: %s=%q, want %q", path, containerdNameAnnotation, d.Annotations[containerdNameAnnotation], b.Ref)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers { // every blob present and of its digest
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := l.Digest(); got != want {
			t.Errorf("%s: blob %s holds %s", path, want, got)
		}
	}
}

// checkIPTablesInImage unpacks the frontend image's filesystem and runs
// both iptables backends from it, in a new network namespace.
func checkIPTablesInImage(t *testing.T, img v1.Image) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: iptables from the image not run")
		return
	}
	root := t.TempDir()
	cmd := exec.Command("tar", "-x", "-C", root)
	cmd.Stdin = mutate.Extract(img)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack the frontend image: %v: %s", err, out)
	}
	if err := checkIPTables(context.Background(), root); err != nil {
		t.Error(err)
	}
	out, err := exec.Command("unshare", "--net", "--mount", "chroot", root, "/usr/local/bin/nodedns-frontend", "--help").CombinedOutput()
	if !bytes.Contains(out, []byte("Usage")) && !bytes.Contains(out, []byte("usage")) {
		t.Errorf("nodedns-frontend --help from the image: %v: %s", err, out)
	}
}

// TestPush pushes an image to an in-process registry on loopback and
// reads back the same digest.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	layer, err := FilesLayer([]File{{Path: "hello", Data: []byte("hi"), Mode: 0o644}}, time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Layers: []v1.Layer{layer}, Entrypoint: []string{"/hello"}, Created: time.Unix(1_700_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(srv.URL, "http://") + "/nodedns/test:v1"
	if err := Push(context.Background(), ref, img, true); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if desc.Digest != want {
		t.Errorf("registry holds %s, pushed %s", desc.Digest, want)
	}
}
