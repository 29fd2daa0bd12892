package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodedns/nodedns/testbed"
)

// TestModeSwitchRefused: against a real kube-apiserver, `helm upgrade` to
// another mode fails before anything changes (the DaemonSet keeps its
// pod template, the release its revision) with a message that says how to
// switch; an upgrade in the same mode goes through.
func TestModeSwitchRefused(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := helmConfig(t, tb)
	chrt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.DisableHooks = DefaultRelease, DefaultNamespace, true
	if _, err := in.RunWithContext(ctx, chrt, map[string]any{"mode": "link-local"}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	upgrade := func(mode string) error {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.DisableHooks = DefaultNamespace, true
		_, err := up.RunWithContext(ctx, DefaultRelease, chrt, map[string]any{"mode": mode})
		return err
	}
	dsMode := func() (string, int64) {
		ds, err := tb.Client().AppsV1().DaemonSets(DefaultNamespace).Get(ctx, "nodedns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				if m, ok := strings.CutPrefix(a, "--mode="); ok && c.Name == "frontend" {
					return m, ds.Generation
				}
			}
		}
		t.Fatalf("the DaemonSet's frontend has no --mode")
		return "", 0
	}
	_, gen := dsMode()
	for _, mode := range []string{"iptables", "node-ip"} {
		err := upgrade(mode)
		want := "mode is link-local on this cluster (DaemonSet kube-system/nodedns) and " + mode + " in these values: helm upgrade does not switch modes"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "helm uninstall nodedns -n kube-system") {
			t.Errorf("helm upgrade to %s: %v, want a refusal containing %q and how to switch", mode, err, want)
		}
		if m, g := dsMode(); m != "link-local" || g != gen {
			t.Errorf("after the refused upgrade to %s: the DaemonSet's mode %s, generation %d (was link-local, %d)", mode, m, g, gen)
		}
	}
	rels, err := action.NewHistory(cfg).Run(DefaultRelease)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 1 {
		t.Errorf("%d revisions after the refused upgrades, want 1", len(rels))
	}
	if err := upgrade("link-local"); err != nil {
		t.Errorf("helm upgrade in the same mode: %v", err)
	}
}
