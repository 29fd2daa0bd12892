package kubespec

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestSelectors(t *testing.T) {
	headless, unlabelled, err := Selectors(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := headless.String(), corev1.IsHeadlessService; got != want {
		t.Errorf("headless selector %q, want %q", got, want)
	}
	if got, want := unlabelled.String(), "endpointslice.kubernetes.io/managed-by notin (endpointslice-controller.k8s.io),!service.kubernetes.io/headless"; got != want {
		t.Errorf("unlabelled selector %q, want %q", got, want)
	}
	const svc = discoveryv1.LabelServiceName
	const by = discoveryv1.LabelManagedBy
	for _, tc := range []struct {
		name    string
		labels  labels.Set
		watched int // 0: neither, 1: headless, 2: unlabelled
	}{
		{"controller, ClusterIP", labels.Set{svc: "web", by: EndpointSliceController}, 0},
		{"controller, headless", labels.Set{svc: "db", by: EndpointSliceController, corev1.IsHeadlessService: ""}, 1},
		{"mirroring controller", labels.Set{svc: "legacy", by: "endpointslicemirroring-controller.k8s.io"}, 2},
		{"written by hand", labels.Set{svc: "byhand", by: "user"}, 2},
		{"no managed-by", labels.Set{svc: "bare"}, 2},
		{"another writer, headless label", labels.Set{svc: "x", by: "operator", corev1.IsHeadlessService: ""}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := 0
			if headless.Matches(tc.labels) {
				got = 1
			}
			if unlabelled.Matches(tc.labels) {
				if got != 0 {
					t.Fatal("both watches match: a slice would be stored twice")
				}
				got = 2
			}
			if got != tc.watched {
				t.Errorf("watched by %d, want %d (0 neither, 1 headless, 2 unlabelled)", got, tc.watched)
			}
		})
	}

	// The stanza's labels are ANDed into both.
	base, err := labels.Parse("team=a")
	if err != nil {
		t.Fatal(err)
	}
	h, u, err := Selectors(base)
	if err != nil {
		t.Fatal(err)
	}
	if h.Matches(labels.Set{corev1.IsHeadlessService: ""}) || u.Matches(labels.Set{by: "user"}) {
		t.Error("a slice without the stanza's labels matched")
	}
	if !h.Matches(labels.Set{"team": "a", corev1.IsHeadlessService: ""}) || !u.Matches(labels.Set{"team": "a", by: "user"}) {
		t.Error("a slice with the stanza's labels did not match")
	}
}
