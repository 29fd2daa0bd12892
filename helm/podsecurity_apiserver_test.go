package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodedns/nodedns/testbed"
)

// TestPodSecurityAdmission installs the chart with a real kube-apiserver
// (its PodSecurity admission on, as by default) into namespaces labelled
// pod-security.kubernetes.io/enforce: baseline and restricted are refused
// at install with the chart's message and leave no object; privileged
// installs. The control: a pod of the DaemonSet's template, created with
// dry run, is refused by the API server in the baseline namespace and
// admitted in the privileged one, so the check refuses exactly what
// admission would. The same dry run with system-node-critical is admitted
// outside kube-system: the API server's defaults do not limit the
// critical priority classes to kube-system; an admission configuration
// that limits them (docs/security.md) is the cluster's.
func TestPodSecurityAdmission(t *testing.T) {
	tb := testbed.StartForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chrt, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	nss := tb.Client().CoreV1().Namespaces()
	install := func(ns string) error {
		getter := genericclioptions.NewConfigFlags(false)
		getter.KubeConfig = &tb.Kubeconfig
		getter.Namespace = &ns
		cfg := new(action.Configuration)
		if err := cfg.Init(getter, ns, "secret", func(string, ...any) {}); err != nil {
			t.Fatal(err)
		}
		in := action.NewInstall(cfg)
		// Hooks need a Job controller; the handoff is TestHandoffAsChartRole's.
		in.ReleaseName, in.Namespace, in.DisableHooks = DefaultRelease, ns, true
		_, err := in.RunWithContext(ctx, chrt, nil)
		return err
	}
	// The pod the DaemonSet would make, from the template as rendered.
	r, err := Render(nil, onEmptyCluster())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := DaemonSet(objs)
	if err != nil {
		t.Fatal(err)
	}
	podIn := func(ns, priorityClass string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "nodedns-", Namespace: ns}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
		p.Spec.PriorityClassName = priorityClass
		p.Spec.ServiceAccountName = "default"
		_, err := tb.Client().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	for _, level := range []string{"baseline", "restricted", "privileged"} {
		ns := "nodedns-psa-" + level
		if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nss.Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		// The testbed runs no controller that would create "default".
		if _, err := tb.Client().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		admitted := podIn(ns, "")
		t.Logf("%s: a pod of the DaemonSet's template (no priority class): %v", level, admitted)
		err := install(ns)
		t.Logf("%s: helm install: %v", level, err)
		if level == "privileged" {
			if admitted != nil {
				t.Errorf("%s: the API server refused the pod: %v", level, admitted)
			}
			if err != nil {
				t.Errorf("helm install into the %s namespace: %v", level, err)
			} else if _, err := tb.Client().AppsV1().DaemonSets(ns).Get(ctx, "nodedns", metav1.GetOptions{}); err != nil {
				t.Errorf("%s: no DaemonSet after the install: %v", level, err)
			}
			// system-node-critical outside kube-system.
			critical := podIn(ns, "system-node-critical")
			t.Logf("%s: the same pod with system-node-critical: %v", level, critical)
			if critical != nil {
				t.Errorf("%s: a system-node-critical pod outside kube-system: %v; the API server's defaults admitted it before (docs/security.md)", level, critical)
			}
			continue
		}
		if admitted == nil || !strings.Contains(admitted.Error(), "violates PodSecurity") {
			t.Errorf("%s: the API server admitted the pod (%v): the control fails, the check is not needed", level, admitted)
		}
		want := "namespace " + ns + ` enforces the Pod Security level "` + level + `"`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce=privileged") {
			t.Errorf("helm install into the %s namespace: %v, want %q and what to do", level, err, want)
		}
		if dss, err := tb.Client().AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(dss.Items) != 0 {
			t.Errorf("%s: DaemonSets after the refused install: %v %v", level, dss, err)
		}
	}
}
