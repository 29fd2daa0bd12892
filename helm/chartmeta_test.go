package helm

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestChartMetadata: the chart needs native sidecars (kubeVersion), and the
// images Artifact Hub lists are the ones the chart deploys by default: its
// appVersion, under the repositories of values.yaml.
func TestChartMetadata(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.KubeVersion != ">=1.29.0-0" {
		t.Errorf("kubeVersion %q, want >=1.29.0-0 (native sidecar)", c.Metadata.KubeVersion)
	}
	var images []struct{ Name, Image string }
	if err := yaml.Unmarshal([]byte(c.Metadata.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatalf("artifacthub.io/images: %v", err)
	}
	img := c.Values["image"].(map[string]any)
	want := map[string]string{}
	for _, name := range []string{"frontend", "backend"} {
		repo := img[name].(map[string]any)["repository"].(string)
		want[repo[strings.LastIndexByte(repo, '/')+1:]] = repo + ":" + c.Metadata.AppVersion
	}
	if len(images) != len(want) {
		t.Errorf("artifacthub.io/images lists %v, want %v", images, want)
	}
	for _, i := range images {
		if want[i.Name] != i.Image {
			t.Errorf("artifacthub.io/images: %s is %q, want %q", i.Name, i.Image, want[i.Name])
		}
	}
}
