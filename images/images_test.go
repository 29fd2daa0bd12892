package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
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
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodedns/nodedns/images/debian"
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

// buildBoth builds both images for every architecture and writes their
// index archives into dir.
func buildBoth(t *testing.T, tree Tree, dir string) []Built {
	t.Helper()
	ctx := context.Background()
	var out []Built
	for _, name := range []string{FrontendName, BackendName} {
		b, err := BuildImage(ctx, tree, DefaultRegistry, name, Architectures, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteIndexArchive(filepath.Join(dir, b.Name+".tar"), b.Index, b.Ref, b.Tag); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// elfMachine is the ELF machine of each architecture's binaries.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImagesReproducible builds both images for linux/amd64 and
// linux/arm64 twice, each time from fresh go builds (two trees share no
// binary) into separate directories, and wants the same index and manifest
// digests and byte-identical archives; then checks what each image
// declares and holds.
func TestImagesReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds both binaries twice")
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	var runs [][]Built
	var tree Tree
	for _, d := range dirs {
		tree = testTree(t)
		start := time.Now()
		runs = append(runs, buildBoth(t, tree, d))
		t.Logf("built both images for %v in %s", Architectures, time.Since(start).Round(time.Millisecond))
	}
	for i := range runs[0] {
		a, b := runs[0][i], runs[1][i]
		da, _ := a.Index.Digest()
		db, _ := b.Index.Digest()
		if da != db {
			t.Errorf("%s: index digests %s and %s from the same tree", a.Name, da, db)
		}
		fa, fb := fileSum(t, filepath.Join(dirs[0], a.Name+".tar")), fileSum(t, filepath.Join(dirs[1], b.Name+".tar"))
		if fa != fb {
			t.Errorf("%s: archives differ (sha256 %s and %s)", a.Name, fa, fb)
		}
		for j, p := range a.Platforms {
			s, err := Summarize(a.Ref, p.Image)
			if err != nil {
				t.Fatal(err)
			}
			if sb, _ := Summarize(b.Ref, b.Platforms[j].Image); sb.Digest != s.Digest {
				t.Errorf("%s linux/%s: digests %s and %s from the same tree", a.Name, p.Arch, s.Digest, sb.Digest)
			}
			t.Logf("%s linux/%s %s: %d layers, %.1f MiB compressed, %.1f MiB uncompressed", a.Ref, p.Arch, s.Digest, s.Layers, float64(s.Compressed)/(1<<20), float64(s.Uncompressed)/(1<<20))
		}
	}

	want := map[string]struct {
		user   string
		layers int
	}{FrontendName: {"", 2}, BackendName: {backendUser, 1}}
	for _, b := range runs[0] {
		checkIndex(t, b, Architectures)
		for _, p := range b.Platforms {
			cf, err := p.Image.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			w := want[b.Name]
			if cf.OS != "linux" || cf.Architecture != p.Arch {
				t.Errorf("%s: platform %s/%s, want linux/%s", b.Name, cf.OS, cf.Architecture, p.Arch)
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
			m, err := p.Image.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Annotations[LabelRevision] != tree.Revision {
				t.Errorf("%s: manifest annotation %s=%q, want %q", b.Name, LabelRevision, m.Annotations[LabelRevision], tree.Revision)
			}
			if len(m.Layers) != w.layers {
				t.Errorf("%s: %d layers, want %d", b.Name, len(m.Layers), w.layers)
			}
			checkBinary(t, b.Name, p)
		}
		checkBinaryCaps(t, b)
		// The archive is an OCI layout go-containerregistry reads back.
		checkArchive(t, filepath.Join(dirs[0], b.Name+".tar"), b)
	}
	checkBase(t, runs[0][0])
}

// checkIndex wants b's index to list one linux image per architecture,
// each the image built for it, with the OCI labels as annotations.
func checkIndex(t *testing.T, b Built, archs []string) {
	t.Helper()
	im, err := b.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(archs) {
		t.Fatalf("%s: index lists %d images, want %d", b.Name, len(im.Manifests), len(archs))
	}
	for i, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != archs[i] {
			t.Errorf("%s: index entry %d: platform %+v, want linux/%s", b.Name, i, d.Platform, archs[i])
		}
		if want, _ := b.Platforms[i].Image.Digest(); d.Digest != want {
			t.Errorf("%s: index entry %d: %s, want the linux/%s image %s", b.Name, i, d.Digest, archs[i], want)
		}
	}
	if im.Annotations[LabelTitle] != b.Name {
		t.Errorf("%s: index annotation %s=%q", b.Name, LabelTitle, im.Annotations[LabelTitle])
	}
}

// checkBinary wants the image's binary to be a static ELF executable for
// the platform's architecture, and the backend's to carry
// cap_net_bind_service=+ep in its layer entry (the frontend's, none).
func checkBinary(t *testing.T, name string, p Platform) {
	t.Helper()
	layers, err := p.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	h, data := layerFile(t, layers[len(layers)-1], "usr/local/bin/"+name)
	if h == nil {
		t.Fatalf("%s linux/%s: no usr/local/bin/%s in the last layer", name, p.Arch, name)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s linux/%s: binary is no ELF file: %v", name, p.Arch, err)
	}
	if f.Machine != elfMachine[p.Arch] || f.Type != elf.ET_EXEC {
		t.Errorf("%s linux/%s: ELF %s %s, want %s ET_EXEC", name, p.Arch, f.Machine, f.Type, elfMachine[p.Arch])
	}
	if f.Section(".interp") != nil {
		t.Errorf("%s linux/%s: binary has an interpreter; want a static one", name, p.Arch)
	}
	var want []byte
	if name == BackendName {
		want, _ = FileCapabilities(CapNetBindService)
	}
	if got := h.PAXRecords[paxXattr+XattrCapability]; got != string(want) {
		t.Errorf("%s linux/%s: binary's %s = % x, want % x", name, p.Arch, XattrCapability, got, want)
	}
}

// layerFile returns the header and content of the entry at name in l, or
// nil.
func layerFile(t *testing.T, l v1.Layer, name string) (*tar.Header, []byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return h, b
		}
	}
}

// checkBase wants each frontend base to hold, for every locked package,
// its status.d stanza, /etc/os-release naming Debian bookworm, and
// iptables-nft and iptables-legacy built for its architecture; and, as
// root, runs both iptables backends from the linux/amd64 image.
func checkBase(t *testing.T, fe Built) {
	t.Helper()
	for _, p := range fe.Platforms {
		lock, err := baseLock(p.Arch)
		if err != nil {
			t.Fatal(err)
		}
		pkgs, err := debian.ParseLock(bytes.NewReader(lock))
		if err != nil {
			t.Fatal(err)
		}
		layers, err := p.Image.Layers()
		if err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
			if h.Typeflag == tar.TypeSymlink {
				files[h.Name] = []byte("-> " + h.Linkname)
			}
		}
		rc.Close()
		for _, l := range pkgs {
			st := files[debian.StatusDir+"/"+l.Name]
			if !bytes.Contains(st, []byte("\nVersion: "+l.Version+"\n")) || !bytes.Contains(st, []byte("Status: install ok installed")) {
				t.Errorf("linux/%s base: %s/%s does not record %s %s as installed:\n%s", p.Arch, debian.StatusDir, l.Name, l.Name, l.Version, st)
			}
		}
		if os := files["usr/lib/os-release"]; !bytes.Contains(os, []byte("VERSION_CODENAME="+DebianSuite)) {
			t.Errorf("linux/%s base: usr/lib/os-release %q does not name %s", p.Arch, os, DebianSuite)
		}
		for _, link := range []string{"usr/sbin/iptables-nft", "usr/sbin/iptables-legacy", "usr/sbin/ip6tables-nft", "usr/sbin/ip6tables-legacy"} {
			if _, ok := files[link]; !ok {
				t.Errorf("linux/%s base: no %s", p.Arch, link)
			}
		}
		for _, multi := range []string{"usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi"} {
			f, err := elf.NewFile(bytes.NewReader(files[multi]))
			if err != nil {
				t.Errorf("linux/%s base: %s: %v", p.Arch, multi, err)
				continue
			}
			if f.Machine != elfMachine[p.Arch] {
				t.Errorf("linux/%s base: %s is for %s", p.Arch, multi, f.Machine)
			}
		}
	}
	checkIPTablesInImage(t, fe.Image)
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
// entry, named for containerd, with the image index's digest, and every
// image of the index complete, each blob of its digest.
func checkArchive(t *testing.T, path string, b Built) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v: %s", path, err, out)
	}
	layoutIdx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI layout: %v", path, err)
	}
	im, err := layoutIdx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d manifests, want 1", path, len(im.Manifests))
	}
	d := im.Manifests[0]
	want, _ := b.Index.Digest()
	if d.Digest != want || d.MediaType != types.OCIImageIndex {
		t.Errorf("%s: index.json names %s %s, want the image index %s", path, d.MediaType, d.Digest, want)
	}
	if d.Annotations[containerdNameAnnotation] != b.Ref {
		t.Errorf("%s: %s=%q, want %q", path, containerdNameAnnotation, d.Annotations[containerdNameAnnotation], b.Ref)
	}
	idx, err := layoutIdx.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.Manifests) != len(b.Platforms) {
		t.Fatalf("%s: the index lists %d images, want %d", path, len(inner.Manifests), len(b.Platforms))
	}
	for _, m := range inner.Manifests {
		img, err := idx.Image(m.Digest)
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
