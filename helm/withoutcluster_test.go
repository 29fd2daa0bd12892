package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodedns/nodedns/testbed"
)

// TestWithoutClusterRefuses: rendered as `helm template` does (lookup finds
// no Namespace kube-system), the chart refuses values that are unsafe to
// apply without a cluster, naming each value to set and those to check,
// and only those still wrong.
func TestWithoutClusterRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  string
		want    []string
		notWant []string
	}{{
		name:   "defaults",
		values: "",
		want: []string{"rendered without a cluster", "helm template", "Argo CD",
			"service.create=false", "service.clusterIP=<the cluster's DNS ClusterIP", `coreDNS.deployment="" (not "coredns"`,
			"check service.name=kube-dns", "fallback.clusterIP (the DNS ClusterIP + 1;", "docs/gitops.md"},
	}, {
		name:    "only the ClusterIP missing",
		values:  "service: {create: false, name: rke2-coredns-rke2-coredns}\ncoreDNS: {deployment: \"\"}\nfallback: {clusterIP: 10.43.0.53}",
		want:    []string{"service.clusterIP=", "check service.name=rke2-coredns-rke2-coredns", "fallback.clusterIP (10.43.0.53;"},
		notWant: []string{"service.create=false", "coreDNS.deployment="},
	}, {
		name:    "the handoff left on",
		values:  "service: {create: false, clusterIP: 10.43.0.10}\ncoreDNS: {deployment: dns}",
		want:    []string{`coreDNS.deployment="" (not "dns"`},
		notWant: []string{"service.create=false", "service.clusterIP="},
	}, {
		name:    "a Service of the chart's",
		values:  "service: {clusterIP: 10.43.0.10}\ncoreDNS: {deployment: \"\"}",
		want:    []string{"service.create=false"},
		notWant: []string{"service.clusterIP=", "coreDNS.deployment="},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := ParseValues(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Render(vals, Options{})
			if err == nil {
				t.Fatal("rendered without a cluster with unsafe values")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("the refusal names %q, which the values set: %v", w, err)
				}
			}
			// The same values on a cluster are not refused for it.
			if _, err := Render(vals, onEmptyCluster()); err != nil && strings.Contains(err.Error(), "without a cluster") {
				t.Errorf("refused on a cluster: %v", err)
			}
		})
	}
}

// TestWithoutClusterSafe: with the values docs/gitops.md lists, the
// rendering without a cluster has no DNS Service and no hooks, and the
// frontend binds the ClusterIP given (not kubeadm's default), the fallback
// Service taking the next address.
func TestWithoutClusterSafe(t *testing.T) {
	for _, tc := range []struct {
		values       map[string]any
		ip, fallback string
	}{
		{WithoutCluster(nil), "10.96.0.10", "10.96.0.11"},
		{WithoutCluster(map[string]any{"service": map[string]any{"clusterIP": "10.43.0.10"}}), "10.43.0.10", "10.43.0.11"},
		{WithoutCluster(map[string]any{"service": map[string]any{"clusterIP": "10.233.0.3", "name": "coredns"},
			"fallback": map[string]any{"clusterIP": "10.233.0.53"}}), "10.233.0.3", "10.233.0.53"},
	} {
		r, err := Render(tc.values, Options{})
		if err != nil {
			t.Fatalf("%v: %v", tc.values, err)
		}
		if len(r.Hooks) != 0 {
			t.Errorf("%s: %d hooks rendered, want none", tc.ip, len(r.Hooks))
		}
		objs, err := r.Objects()
		if err != nil {
			t.Fatal(err)
		}
		var services []string
		for _, o := range objs {
			if s, ok := o.Obj.(*corev1.Service); ok {
				services = append(services, s.Name)
				if s.Name == "nodedns-fallback" && s.Spec.ClusterIP != tc.fallback {
					t.Errorf("%s: fallback Service at %s, want %s", tc.ip, s.Spec.ClusterIP, tc.fallback)
				}
			}
		}
		if strings.Join(services, ",") != "nodedns-metrics,nodedns-fallback" && strings.Join(services, ",") != "nodedns-fallback,nodedns-metrics" {
			t.Errorf("%s: Services %v, want only nodedns-fallback and nodedns-metrics", tc.ip, services)
		}
		if got := frontendSetting(t, r, "service-ip"); got != tc.ip {
			t.Errorf("frontend --service-ip=%s, want %s", got, tc.ip)
		}
		if got := frontendSetting(t, r, "fallback"); got != tc.fallback+":53" {
			t.Errorf("frontend --fallback=%s, want %s:53", got, tc.fallback)
		}
		if strings.Contains(r.Notes, "is scaled down") {
			t.Errorf("%s: NOTES.txt speaks of a handoff: %s", tc.ip, r.Notes)
		}
	}
	// WithoutCluster leaves its argument alone.
	in := map[string]any{"service": map[string]any{"create": true}}
	WithoutCluster(in)
	if in["service"].(map[string]any)["create"] != true {
		t.Errorf("WithoutCluster changed its argument: %v", in)
	}
}

// TestWithoutClusterHelmCommands runs Helm's own install action against a
// real kube-apiserver the ways the Helm commands set it up, with the
// default values: the ones that read the cluster render (the check passes
// on the kube-system the API server creates), the ones that do not are
// refused. Nothing is installed: every run is a dry run.
func TestWithoutClusterHelmCommands(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := helmConfig(t, tb)
	chrt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command      string
		dryRun       string
		clientOnly   bool
		readsCluster bool
	}{
		{"helm install --dry-run=server", "server", false, true},
		{"helm install --dry-run=client", "client", false, false},
		{"helm template --validate", "true", false, false},
		{"helm template", "true", true, false},
		{"helm template --dry-run=server", "server", true, true},
	} {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace = DefaultRelease, DefaultNamespace
		in.DryRun, in.DryRunOption, in.ClientOnly, in.Replace = true, tc.dryRun, tc.clientOnly, true
		if tc.clientOnly {
			kv, err := chartutil.ParseKubeVersion(DefaultKubeVersion)
			if err != nil {
				t.Fatal(err)
			}
			in.KubeVersion = kv
		}
		rel, err := in.RunWithContext(ctx, chrt, nil)
		switch {
		case tc.readsCluster && err != nil:
			t.Errorf("%s: %v", tc.command, err)
		case tc.readsCluster && !strings.Contains(rel.Manifest, "name: kube-dns"):
			t.Errorf("%s: no kube-dns Service rendered on a cluster without one", tc.command)
		case !tc.readsCluster && (err == nil || !strings.Contains(err.Error(), "rendered without a cluster")):
			t.Errorf("%s: %v, want the refusal of a rendering without a cluster", tc.command, err)
		}
	}
}
