package testbed

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The configuration files of a real node. Each setting that is not a
// plain default says why it is set; REALNODE facts are cited by the pitfall
// they avoid.

// registryHostsDir is containerd's registry config_path, relative to the
// node's directory: one <host>/hosts.toml per registry (hostsTOML). Without
// any, every registry is reached as containerd's defaults say, as without
// a config_path.
const registryHostsDir = "containerd/certs.d"

// containerdConfig is containerd 1.6's config (version 2) for node n.
func (n *RealNode) containerdConfig() string {
	d := n.Dir
	return fmt.Sprintf(`version = 2
root = %q
state = %q
# Snapshotters this machine cannot use only log errors at start.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # The machine lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  # Pod network namespaces are bind mounts under the state directory, in
  # the node's mount namespace, never in the host's /run/netns.
  netns_mounts_under_state_dir = true
  # Sets net.ipv4.ip_unprivileged_port_start=0 in each pod network
  # namespace: the backend binds :53 as uid 65532, as CoreDNS's image does
  # with a file capability.
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # Read at every pull: a registry added to a running node
  # (RealNode.AddRegistry) is used from the next pull on.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"),
		n.containerdSocket(), filepath.Join(d, "containerd", "ttrpc.sock"),
		PauseImage, filepath.Join(d, "cni"), filepath.Join(d, registryHostsDir))
}

// hostsTOML is containerd's hosts.toml for registry r's name, r.Host: a
// mirror at r.NodeHost, plain HTTP, for pulls only (resolving a tag to a
// digest, then fetching by digest), as a cluster's nodes are pointed at
// a local registry. No server line: the default upstream would be
// r.Host itself, which inside the node is the node's own loopback, where
// nothing serves it, so an image of r.Host comes through the mirror or
// not at all.
func hostsTOML(r *Registry) string {
	return fmt.Sprintf(`# Images named %s are pulled from the test's registry in the
# control-plane namespace.
[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, r.Host, r.NodeHost)
}

func (n *RealNode) containerdSocket() string { return filepath.Join(n.Dir, "containerd.sock") }

// cniConfig is the pod network of node n: a bridge in the node namespace
// with host-local addresses from the node's PodCIDR, masqueraded when they
// leave it (the control plane's namespace has no route to pod subnets).
func (n *RealNode) cniConfig() string {
	ranges, routes := n.cniRanges()
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "testbed",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [%s],
        "routes": [%s]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, ranges, routes)
}

// cniRanges are the host-local ranges and routes of cniConfig: PodCIDR,
// and PodCIDR6 in a dual-stack testbed.
func (n *RealNode) cniRanges() (string, string) {
	ranges, routes := fmt.Sprintf(`[{"subnet": %q}]`, n.PodCIDR), `{"dst": "0.0.0.0/0"}`
	if n.PodCIDR6 != "" {
		ranges += fmt.Sprintf(`, [{"subnet": %q}]`, n.PodCIDR6)
		routes += `, {"dst": "::/0"}`
	}
	return ranges, routes
}

// kubeletConfig is the KubeletConfiguration of node n.
func (n *RealNode) kubeletConfig(clusterDNS []string) string {
	d := n.Dir
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
tlsCertFile: %q
tlsPrivateKeyFile: %q
address: %q
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
containerRuntimeEndpoint: %q
cgroupDriver: cgroupfs
# Under this run's tree, so that Stop and a later run find every container.
cgroupRoot: %q
# kubelet >= 1.35 refuses cgroup v1 otherwise; this machine has v1.
failCgroupV1: false
failSwapOn: false
# Never write the host-wide kernel sysctls: the node's mount namespace
# holds read-only files with the values kubelet wants over them.
protectKernelDefaults: true
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: %q
staticPodPath: %q
# Images are imported or pulled once by a test: keep them whatever the
# disk holds.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
# Shorter than the defaults, for a test: status and pod lifecycle.
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 5s
serializeImagePulls: false
`, filepath.Join(d, "ca.crt"), filepath.Join(d, "kubelet.crt"), filepath.Join(d, "kubelet.key"),
		n.IP.String(), "unix://"+n.containerdSocket(), n.cgroupRoot+"/pods",
		quoteJoin(clusterDNS), filepath.Join(d, "resolv.conf"), filepath.Join(d, "manifests"))
}

func quoteJoin(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// kernelDefaults are the sysctls kubelet would set host-wide (pitfall 6).
var kernelDefaults = []struct{ path, value string }{
	{"vm/overcommit_memory", "1"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
}

// mountScript runs as the holder of the node's mount, UTS and IPC
// namespaces, inside its network namespace: it builds the node's view of
// the filesystem, touching only mounts of that new mount namespace, then
// signals readiness and sleeps until killed.
func (n *RealNode) mountScript() string {
	d := n.Dir
	var b strings.Builder
	b.WriteString("set -eu\n")
	// Private /run and /var: kubelet uses /var/lib/kubelet/device-plugins
	// and /var/log/containers whatever --root-dir says, runc and the shims
	// /run/containerd (pitfall 7).
	fmt.Fprintf(&b, "mount -t tmpfs -o mode=0755 tmpfs /run\n")
	fmt.Fprintf(&b, "mount --bind %q /var\n", filepath.Join(d, "var"))
	// `ip netns exec` remounted /sys and lost the cgroup mounts (pitfall 1);
	// the cgroup2 "unified" mount stays out (pitfall 2).
	fmt.Fprintf(&b, "mount -t tmpfs -o mode=0755 cgroup %s\n", cgroupFS)
	for _, m := range cgroupMounts() {
		fmt.Fprintf(&b, "mkdir -p %q && mount -t cgroup -o %s cgroup %q\n", m.dir, m.opts, m.dir)
	}
	for _, k := range kernelDefaults {
		fmt.Fprintf(&b, "mount -o bind,ro %q /proc/sys/%s\n", filepath.Join(d, "sysctl", strings.ReplaceAll(k.path, "/", ".")), k.path)
	}
	fmt.Fprintf(&b, "hostname %q\n", n.Name)
	fmt.Fprintf(&b, "touch %q\n", filepath.Join(d, "namespaces.ready"))
	b.WriteString("exec sleep infinity\n")
	return b.String()
}
