package testbed

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/images"
)

// registryImages are what testRegistryPull pushes: an image by tag, and an
// index of a linux/amd64 and a linux/arm64 image. Each image is the pause
// image plus a layer of its own, so no blob of theirs was imported.
type registryImages struct {
	single, multi         string  // references by tag, Host/repository:tag
	singleDigest          v1.Hash // the image's manifest
	indexDigest           v1.Hash // the index's manifest
	amd64Digest           v1.Hash // the index's amd64 manifest
	arm64Digest           v1.Hash // the index's arm64 manifest
	singleLayer, armLayer v1.Hash // a layer only the single image, only the arm64 image has
}

// testRegistryPull runs two pods on node n whose images exist only in reg,
// named by reg.Host: one by an image manifest's tag, one by a multi-arch
// index's tag. Both must run, the node's containerd must list both images
// after and neither before (nothing imported), and reg must have served
// their manifests and layers to the nodes' listener, while the index's
// arm64 manifest and layer were never asked for. The sandbox image stays
// imported: it is the node's infrastructure, which a kubeadm node has too
// before any pod runs.
func testRegistryPull(ctx context.Context, t *testing.T, tb *Testbed, reg *Registry, n *RealNode, pause Archive) {
	ri := pushRegistryImages(ctx, t, reg, pause)
	before, err := n.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ri.single, ri.multi, ri.singleDigest.String(), ri.indexDigest.String()} {
		if strings.Contains(before, s) {
			t.Fatalf("node %s holds %s before any pod asked for it:\n%s", n.Name, s, before)
		}
	}

	c := tb.Client()
	start := time.Now()
	singlePod, multiPod := "pulled-single-"+n.Name, "pulled-multiarch-"+n.Name
	pods := map[string]string{singlePod: ri.single, multiPod: ri.multi}
	for pod, image := range pods {
		createPulledPod(ctx, t, tb, n, pod, image)
	}
	imageIDs := map[string]string{}
	for pod := range pods {
		imageIDs[pod] = waitContainerRunning(ctx, t, tb, pod)
	}
	t.Logf("two pods running on %s from %s in %s", n.Name, reg.Host, time.Since(start).Round(time.Millisecond))

	for pod, want := range map[string]v1.Hash{singlePod: ri.singleDigest, multiPod: ri.indexDigest} {
		if !strings.HasSuffix(imageIDs[pod], "@"+want.String()) {
			t.Errorf("pod %s runs image %s, want digest %s", pod, imageIDs[pod], want)
		}
	}
	after, err := n.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ref, d := range map[string]v1.Hash{ri.single: ri.singleDigest, ri.multi: ri.indexDigest} {
		if !imageListed(after, ref, d.String()) {
			t.Errorf("node %s lacks %s@%s after the pull:\n%s", n.Name, ref, d, after)
		}
	}

	reqs := reg.Requests()
	var fromNodes []RegistryRequest
	for _, q := range reqs {
		if q.FromNodes {
			fromNodes = append(fromNodes, q)
		}
	}
	t.Logf("requests from the nodes:\n%s", requestLines(fromNodes))
	single, multi := repoPath(ri.single), repoPath(ri.multi)
	for _, w := range []RegistryRequest{
		{FromNodes: true, Method: "GET", Path: single + "/manifests/" + ri.singleDigest.String(), Status: 200},
		{FromNodes: true, Method: "GET", Path: single + "/blobs/" + ri.singleLayer.String(), Status: 200},
		{FromNodes: true, Method: "GET", Path: multi + "/manifests/" + ri.indexDigest.String(), Status: 200},
		{FromNodes: true, Method: "GET", Path: multi + "/manifests/" + ri.amd64Digest.String(), Status: 200},
	} {
		if !containsRequest(reqs, w) {
			t.Errorf("the registry did not serve the nodes %s %s:\n%s", w.Method, w.Path, requestLines(reqs))
		}
	}
	for _, q := range reqs {
		if q.FromNodes && (strings.HasSuffix(q.Path, ri.arm64Digest.String()) || strings.HasSuffix(q.Path, ri.armLayer.String())) {
			t.Errorf("a node fetched the arm64 image's %s %s", q.Method, q.Path)
		}
	}
	for pod := range pods {
		if err := c.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
}

// testPullNeedsMirror runs a pod of an image in reg on node n, which has no
// mirror for reg: the pull must fail, since reg.Host inside the node is the
// node's own loopback. So a pod that runs in testRegistryPull pulled
// through the mirror.
func testPullNeedsMirror(ctx context.Context, t *testing.T, tb *Testbed, reg *Registry, n *RealNode, pause Archive) {
	ri := pushRegistryImages(ctx, t, reg, pause)
	pod := "unmirrored-" + n.Name
	createPulledPod(ctx, t, tb, n, pod, ri.single)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var state string
	err := waitFor(ctx, "pod "+pod+" failing to pull", func() (bool, error) {
		p, err := tb.Client().CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil {
				return false, fmt.Errorf("runs %s without a mirror", s.ImageID)
			}
			if w := s.State.Waiting; w != nil {
				state = w.Reason + ": " + w.Message
				return w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (last state: %s)", err, state)
	}
	t.Logf("without a mirror: %s", state)
	if err := tb.Client().CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// createPulledPod creates a pod on node n running image, pulled if absent.
func createPulledPod(ctx context.Context, t *testing.T, tb *Testbed, n *RealNode, name, image string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "pause", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	if _, err := tb.Client().CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// repoPath is the registry API path of a reference's repository,
// "/v2/<repository>".
func repoPath(ref string) string {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		panic(err)
	}
	return "/v2/" + r.Context().RepositoryStr()
}

// pushRegistryImages pushes the images testRegistryPull pulls, built on the
// pause archive's image (entrypoint /pause: podtool waiting for SIGTERM).
func pushRegistryImages(ctx context.Context, t *testing.T, reg *Registry, pause Archive) registryImages {
	t.Helper()
	token := randomToken()[:8]
	ri := registryImages{
		single: reg.Ref("nodedns-test/pause:" + token),
		multi:  reg.Ref("nodedns-test/multiarch:" + token),
	}
	marker := func(what string) (v1.Layer, v1.Hash) {
		l, err := images.FilesLayer([]images.File{{Path: "marker", Data: []byte(what + " " + token + "\n"), Mode: 0o644}}, podToolEpoch)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return l, d
	}
	push := func(ref string, write func(name.Reference) error) {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(r); err != nil {
			t.Fatalf("push %s: %v", ref, err)
		}
	}
	err := withArchiveImage(pause.Path, func(base v1.Image) error {
		var singleMarker, amdMarker, armMarker v1.Layer
		singleMarker, ri.singleLayer = marker("single")
		amdMarker, _ = marker("amd64")
		armMarker, ri.armLayer = marker("arm64")
		single, err := mutate.Append(base, mutate.Addendum{Layer: singleMarker, MediaType: types.OCILayer})
		if err != nil {
			return err
		}
		amd, err := mutate.Append(base, mutate.Addendum{Layer: amdMarker, MediaType: types.OCILayer})
		if err != nil {
			return err
		}
		// The arm64 image is a marker alone: nothing here runs arm64, and
		// the test asserts it is never fetched.
		arm, err := images.Build(images.Spec{Layers: []v1.Layer{armMarker}, Entrypoint: []string{"/pause"}, Created: podToolEpoch})
		if err != nil {
			return err
		}
		arm = withArch(t, arm, "arm64")
		idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
			mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
			mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		)
		if ri.singleDigest, err = single.Digest(); err != nil {
			return err
		}
		if ri.indexDigest, err = idx.Digest(); err != nil {
			return err
		}
		if ri.amd64Digest, err = amd.Digest(); err != nil {
			return err
		}
		if ri.arm64Digest, err = arm.Digest(); err != nil {
			return err
		}
		push(ri.single, func(r name.Reference) error { return remote.Write(r, single, remote.WithContext(ctx)) })
		push(ri.multi, func(r name.Reference) error { return remote.WriteIndex(r, idx, remote.WithContext(ctx)) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ri
}

// waitContainerRunning waits until the pod's container runs and returns
// the image ID kubelet reports for it; an image pull that fails ends the
// wait at once with kubelet's reason.
func waitContainerRunning(ctx context.Context, t *testing.T, tb *Testbed, pod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var imageID, state string
	err := waitFor(ctx, "pod "+pod+" running", func() (bool, error) {
		p, err := tb.Client().CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			switch {
			case s.State.Running != nil:
				imageID = s.ImageID
				return true, nil
			case s.State.Waiting != nil:
				state = s.State.Waiting.Reason + ": " + s.State.Waiting.Message
				if r := s.State.Waiting.Reason; r == "ErrImagePull" || r == "ImagePullBackOff" || r == "InvalidImageName" {
					return false, fmt.Errorf("%s", state)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (last state: %s)", err, state)
	}
	return imageID
}
