package release

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestSetImageValues: only the repositories and the tag change, whatever
// their quoting, and a values.yaml without those keys is an error.
func TestSetImageValues(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{
			name: "plain",
			in:   "# top\nimage:\n  frontend:\n    # fe\n    repository: ghcr.io/a/nodedns-frontend\n\n  backend:\n    repository: ghcr.io/a/nodedns-backend  # be\n  tag: \"\"\n",
			want: "# top\nimage:\n  frontend:\n    # fe\n    repository: \"r.example/x/nodedns-frontend\"\n\n  backend:\n    repository: \"r.example/x/nodedns-backend\"  # be\n  tag: \"\"\n",
		},
		{
			name: "quoted and tagged",
			in:   "image:\n  frontend: {repository: 'a'}\n  backend:\n    repository: \"b\\\"c\"\n  tag: v9\n",
			want: "image:\n  frontend: {repository: \"r.example/x/nodedns-frontend\"}\n  backend:\n    repository: \"r.example/x/nodedns-backend\"\n  tag: \"\"\n",
		},
		{name: "no backend", in: "image:\n  frontend:\n    repository: a\n  tag: \"\"\n", err: "no image.backend.repository"},
		{name: "block scalar", in: "image:\n  frontend:\n    repository: |\n      a\n  backend:\n    repository: b\n  tag: \"\"\n", err: "plain or quoted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setImageValues([]byte(tc.in), "r.example/x")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestPackageChart: the packaged chart carries the version as version and
// appVersion, the chart's values.yaml is unchanged but for the image
// lines, and a version that is no SemVer is refused.
func TestPackageChart(t *testing.T) {
	_, c, err := PackageChart("r.example/x", "0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != "0.3.0" || c.Metadata.AppVersion != "0.3.0" {
		t.Errorf("version %q appVersion %q", c.Metadata.Version, c.Metadata.AppVersion)
	}
	for k, want := range map[string]string{"image.frontend.repository": "r.example/x/nodedns-frontend", "image.backend.repository": "r.example/x/nodedns-backend", "image.tag": ""} {
		if got, err := chartutil.Values(c.Values).PathValue(k); err != nil || got != want {
			t.Errorf("%s = %v (%v), want %q", k, got, err, want)
		}
	}
	wantImages := "- name: nodedns-frontend\n  image: r.example/x/nodedns-frontend:0.3.0\n- name: nodedns-backend\n  image: r.example/x/nodedns-backend:0.3.0\n"
	if got := c.Metadata.Annotations["artifacthub.io/images"]; got != wantImages {
		t.Errorf("artifacthub.io/images:\n%s\nwant:\n%s", got, wantImages)
	}
	if c.Schema == nil {
		t.Error("the packaged chart has no values.schema.json")
	}
	if _, _, err := PackageChart("r.example/x", "not a version"); err == nil {
		t.Error("version \"not a version\": no error")
	}
}
