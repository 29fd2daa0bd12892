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
		for _, a := range []string{"--namespace=kube-system", "--deployment=dns", "--daemonset=nodedns", "--replicas=3", "--timeout=220s", "--service=kube-dns"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%s: args %q lack %s", hook, c.Args, a)
			}
		}
		// The flags the operator opts into are off by default.
		for _, a := range []string{"--allow-no-dns", "--override-reconciler"} {
			if slices.Contains(c.Args, a) {
				t.Errorf("%s: args %q have %s by default", hook, c.Args, a)
			}
		}
		if verb == "scale-down" && (!slices.Contains(c.Args, "--pod-ports=53") || !slices.Contains(c.Args, "--settle=30s") || !slices.Contains(c.Args, "--keep-replicas=1")) {
			t.Errorf("%s: args %q lack --pod-ports=53 (the fallback port in iptables mode), --settle=30s or --keep-replicas=1 (one CoreDNS replica kept)", hook, c.Args)
		}
		if verb == "restore" && slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--keep-replicas") }) {
			t.Errorf("%s: args %q have --keep-replicas, a flag of scale-down", hook, c.Args)
		}
		// A refusal (exit 3) fails the Job at once: the uninstall stops
		// without three runs' back-off.
		pfp := j.Spec.PodFailurePolicy
		if pfp == nil || len(pfp.Rules) != 1 || pfp.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob || pfp.Rules[0].OnExitCodes == nil ||
			!slices.Equal(pfp.Rules[0].OnExitCodes.Values, []int32{3}) || pfp.Rules[0].OnExitCodes.Operator != batchv1.PodFailurePolicyOnExitCodesOpIn {
			t.Errorf("%s: podFailurePolicy %+v, want FailJob on exit code 3", hook, pfp)
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
	// Write access to the one Deployment; the rest is what the checks
	// read: Deployments (autoscalers), the pods, the DNS Service and its
	// EndpointSlices.
	want := []string{"apps/deployments dns: get,patch", "apps/deployments : list", "apps/daemonsets nodedns: get", "/pods : list,get,patch,delete",
		"/services kube-dns: get", "discovery.k8s.io/endpointslices : list"}
	if !slices.Equal(rules, want) {
		t.Errorf("Role rules %q, want %q", rules, want)
	}
	if Find(objs, "ServiceAccount", "nodedns-handoff") == nil || Find(objs, "RoleBinding", "nodedns-handoff") == nil {
		t.Errorf("no ServiceAccount or RoleBinding nodedns-handoff: %s", Kinds(objs))
	}
	// Cluster-wide: listing the nodes, nothing else.
	cr, _ := Find(objs, "ClusterRole", "nodedns-handoff").(*rbacv1.ClusterRole)
	crb, _ := Find(objs, "ClusterRoleBinding", "nodedns-handoff").(*rbacv1.ClusterRoleBinding)
	if cr == nil || len(cr.Rules) != 1 || !slices.Equal(cr.Rules[0].Resources, []string{"nodes"}) || !slices.Equal(cr.Rules[0].Verbs, []string{"list"}) ||
		!slices.Equal(cr.Rules[0].APIGroups, []string{""}) || len(cr.Rules[0].ResourceNames) != 0 {
		t.Errorf("ClusterRole nodedns-handoff %+v, want nodes: list only", cr)
	}
	if crb == nil || crb.RoleRef.Name != "nodedns-handoff" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "nodedns-handoff" || crb.Subjects[0].Namespace != "kube-system" {
		t.Errorf("ClusterRoleBinding nodedns-handoff %+v does not bind the hooks' ServiceAccount", crb)
	}

	// The operator's values reach the flags: another Service, the ports
	// of node-ip mode, the two opt-ins (each on its verb only).
	r, _, _ = render(t, "mode: node-ip\nservice: {name: rke2-coredns-rke2-coredns, clusterIP: 10.43.0.10}\nfallback: {clusterIP: 10.43.0.11}\ncoreDNS: {overrideReconciler: true, allowUninstallWithoutDNS: true, keepReplicas: 0}")
	jobs = handoffJobs(t, r)
	for hook, wantArgs := range map[string][]string{
		"post-install,post-upgrade": {"--service=rke2-coredns-rke2-coredns", "--pod-ports=5301,53", "--override-reconciler", "--keep-replicas=0"},
		"pre-delete":                {"--service=rke2-coredns-rke2-coredns", "--allow-no-dns"},
	} {
		j := jobs[hook]
		if j == nil {
			t.Fatalf("no %s hook", hook)
		}
		args := j.Spec.Template.Spec.Containers[0].Args
		for _, a := range wantArgs {
			if !slices.Contains(args, a) {
				t.Errorf("%s: args %q lack %s", hook, args, a)
			}
		}
		for _, a := range []string{"--allow-no-dns", "--override-reconciler", "--pod-ports=5301,53"} {
			if !slices.Contains(wantArgs, a) && slices.Contains(args, a) {
				t.Errorf("%s: args %q have %s, which is the other verb's", hook, args, a)
			}
		}
	}

	// NOTES.txt tells where the reason is when CoreDNS stays.
	if !strings.Contains(r.Notes, "kubectl -n kube-system get deployment coredns") || !strings.Contains(r.Notes, `nodedns\.io/handoff`) {
		t.Errorf("NOTES.txt does not say how to see why CoreDNS stays:\n%s", r.Notes)
	}

	// coreDNS.deployment "" turns the handoff off: no hooks, no Role.
	r, objs, _ = render(t, `coreDNS: {deployment: ""}`)
	if len(r.Hooks) != 0 || Find(objs, "Role", "nodedns-handoff") != nil || Find(objs, "ClusterRole", "nodedns-handoff") != nil || strings.Contains(r.Notes, "io/handoff") {
		t.Errorf("coreDNS.deployment \"\": %d hooks, objects %s", len(r.Hooks), Kinds(objs))
	}
}
