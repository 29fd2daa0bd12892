package helm

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// handoffJobs returns the hook Jobs of a rendering by hook annotation.
func handoffJobs(t *testing.T, r *Rendering) map[string]*batchv1.Job {
	t.Helper()
	objs, err := r.HookObjects()
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]*batchv1.Job{}
	for _, o := range objs {
		j, ok := o.Obj.(*batchv1.Job)
		if !ok {
			t.Errorf("hook %s is a %s, want only Jobs", o.Source, o.GVK.Kind)
			continue
		}
		jobs[j.Annotations["helm.sh/hook"]] = j
	}
	return jobs
}

// TestHandoffHooks: the chart hands the cluster's DNS over from the CoreDNS
// Deployment with two hook Jobs of the backend's image, running as a
// ServiceAccount of the release whose Role reaches only that Deployment,
// the DaemonSet and the pods.
func TestHandoffHooks(t *testing.T) {
	r, objs, _ := render(t, "image: {tag: v1.2.3}\ncoreDNS: {deployment: dns, replicas: 3}")
	jobs := handoffJobs(t, r)
	for hook, verb := range map[string]string{"post-install,post-upgrade": "scale-down", "pre-delete": "restore"} {
		j := jobs[hook]
		if j == nil {
			t.Errorf("no %s hook Job; hooks: %v", hook, jobs)
			continue
		}
		if p := j.Annotations["helm.sh/hook-delete-policy"]; p != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s: delete policy %q", hook, p)
		}
		if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit > 3 || j.Spec.ActiveDeadlineSeconds == nil || *j.Spec.ActiveDeadlineSeconds != 240 {
			t.Errorf("%s: backoffLimit %v activeDeadlineSeconds %v", hook, j.Spec.BackoffLimit, j.Spec.ActiveDeadlineSeconds)
		}
		if _, ok := j.Spec.Template.Labels["app.kubernetes.io/instance"]; ok {
			t.Errorf("%s: the Job's pods carry app.kubernetes.io/instance: kubectl get pods -l app.kubernetes.io/instance=nodedns would list them", hook)
		}
		pod := j.Spec.Template.Spec
		c := pod.Containers[0]
		want := []string{"nodedns-backend", "handoff", verb}
		if !slices.Equal(c.Command, want) || c.Image != "ghcr.io/nodedns/nodedns-backend:v1.2.3" {
			t.Errorf("%s: %s %q, want the backend image and %q", hook, c.Image, c.Command, want)
		}
		for _, a := range []string{"--namespace=kube-system", "--deployment=dns", "--daemonset=nodedns", "--replicas=3", "--timeout=240s"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%s: args %q lack %s", hook, c.Args, a)
			}
		}
		if pod.ServiceAccountName != "nodedns-handoff" || pod.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: serviceAccount %q restartPolicy %q", hook, pod.ServiceAccountName, pod.RestartPolicy)
		}
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.Operator == corev1.TolerationOpExists && tol.Key == "" }) {
			t.Errorf("%s: does not tolerate every taint: %v", hook, pod.Tolerations)
		}
		sc := c.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) {
			t.Errorf("%s: security context %+v: want non-root, drop ALL, add only the binary's file capability", hook, sc)
		}
	}
	role, _ := Find(objs, "Role", "nodedns-handoff").(*rbacv1.Role)
	if role == nil {
		t.Fatalf("no Role nodedns-handoff among the release's objects (it must exist during pre-delete): %s", Kinds(objs))
	}
	var rules []string
	for _, r := range role.Rules {
		rules = append(rules, strings.Join(r.APIGroups, ",")+"/"+strings.Join(r.Resources, ",")+" "+strings.Join(r.ResourceNames, ",")+": "+strings.Join(r.Verbs, ","))
	}
	want := []string{"apps/deployments dns: get,patch", "apps/daemonsets nodedns: get", "/pods : list"}
	if !slices.Equal(rules, want) {
		t.Errorf("Role rules %q, want %q", rules, want)
	}
	if Find(objs, "ServiceAccount", "nodedns-handoff") == nil || Find(objs, "RoleBinding", "nodedns-handoff") == nil {
		t.Errorf("no ServiceAccount or RoleBinding nodedns-handoff: %s", Kinds(objs))
	}

	// coreDNS.deployment "" turns the handoff off: no hooks, no Role.
	r, objs, _ = render(t, `coreDNS: {deployment: ""}`)
	if len(r.Hooks) != 0 || Find(objs, "Role", "nodedns-handoff") != nil {
		t.Errorf("coreDNS.deployment \"\": %d hooks, objects %s", len(r.Hooks), Kinds(objs))
	}
}
