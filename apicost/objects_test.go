package apicost

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodedns/nodedns/backend/kubespec"
	"github.com/nodedns/nodedns/testbed"
)

// TestStudySlices checks that the study's slices carry the labels their
// writers give them, as each watch set's selectors see them, and that the
// controller's endpoints weigh what a real controller's do.
func TestStudySlices(t *testing.T) {
	headless, unlabelled, err := kubespec.Selectors(nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := labels.Parse("!" + corev1.IsHeadlessService)
	if err != nil {
		t.Fatal(err)
	}
	ip := testbed.EndpointIP(1)
	for _, tc := range []struct {
		name                  string
		w                     sliceWriter
		ep                    discoveryv1.Endpoint
		proxyWatch, specWatch bool // kube-proxy sees it; a spec backend sees it
	}{
		{"controller, ClusterIP", byController, studyEndpoint("web", 1, 80, ip), true, false},
		{"controller, headless", byControllerHeadless, studyEndpoint("db", 1, 80, ip), false, true},
		{"operator, no selector", byOperator, operatorEndpoint(ip), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := studyService("x", tc.w)
			if got := svc.Spec.Selector != nil; got != (tc.w != byOperator) {
				t.Errorf("Service has a selector: %v", got)
			}
			s := studySlice(svc, "x-bbbbb", tc.w, []discoveryv1.Endpoint{tc.ep})
			set := labels.Set(s.Labels)
			if got := proxy.Matches(set); got != tc.proxyWatch {
				t.Errorf("kube-proxy's selector matches %v, want %v (labels %v)", got, tc.proxyWatch, s.Labels)
			}
			if got := headless.Matches(set) || unlabelled.Matches(set); got != tc.specWatch {
				t.Errorf("spec watches match %v, want %v (labels %v)", got, tc.specWatch, s.Labels)
			}
		})
	}
	// A real controller's endpoint (targetRef with uid, nodeName, zone,
	// three conditions) is several times a bare one.
	rich, bare := studyEndpoint("svc-123", 617, 80, ip), testbed.ReadyEndpoint(ip)
	if r, b := rich.Size(), bare.Size(); r < 110 || r < 4*b {
		t.Errorf("controller endpoint %d B in protobuf, bare %d B: want at least 110 B and 4× bare", r, b)
	}
}
