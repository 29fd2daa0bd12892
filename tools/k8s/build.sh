#!/usr/bin/env bash
# build.sh builds Kubernetes binaries from this module into the
# version-keyed cache directory the testbed reads, unless they are already
# there; cached binaries return at once. On two cores with an empty Go build
# cache, after the project's own build: kube-apiserver 131 s, kube-proxy 6 s,
# and for real nodes kubelet 28 s, kube-controller-manager 17 s,
# kube-scheduler 3 s, kubectl 13 s (README, "Develop").
#
# Usage: tools/k8s/build.sh [binary...]
#   default: kube-apiserver kube-proxy
#   realnode: kube-apiserver kube-proxy kubelet kube-controller-manager kube-scheduler kubectl
#   e2e.test: the sig-network e2e suite of ./e2e (the framework of
#     k8s.io/kubernetes/test/e2e with test/e2e/network only), for conformance/
#   agnhost: the binary of the e2e test image agnhost, for conformance/
# Cache: $NODEDNS_K8S_BIN_DIR, else ${XDG_CACHE_HOME:-~/.cache}/nodedns/k8s-<version>
set -euo pipefail
cd "$(dirname "$0")"

version=v1.36.3 # keep in step with go.mod and testbed.KubernetesVersion
dir=${NODEDNS_K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodedns/k8s-$version}
mkdir -p "$dir"
cmds=("$@")
((${#cmds[@]})) || cmds=(kube-apiserver kube-proxy)
if [[ ${cmds[*]} == realnode ]]; then
	cmds=(kube-apiserver kube-proxy kubelet kube-controller-manager kube-scheduler kubectl)
fi

# One build at a time per cache directory: test packages run in parallel and
# may all find a binary missing; the later ones wait and then find it cached.
exec 9>"$dir/.lock"
flock 9

# Stamp the version the way the upstream build does, so /version and
# --version report the release rather than v0.0.0-master.
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=36 -X $v.gitTreeState=clean"

for cmd in "${cmds[@]}"; do
	case $cmd in
	kube-apiserver | kube-proxy | kubelet | kube-controller-manager | kube-scheduler | kubectl | e2e.test | agnhost) ;;
	*) echo "build.sh: unknown binary $cmd" >&2; exit 2 ;;
	esac
	stamp=
	if [[ $cmd == e2e.test ]]; then
		# The suite's source lives here, not in a release: key the cached
		# binary by it too.
		stamp=$(cat e2e/*.go go.mod go.sum | sha256sum | cut -c1-16)
	fi
	if [[ -x "$dir/$cmd" && $stamp == "$(cat "$dir/.$cmd.stamp" 2>/dev/null || true)" ]]; then
		echo "$dir/$cmd: cached"
		continue
	fi
	echo "building $cmd $version into $dir (the first build takes minutes)"
	start=$SECONDS
	tmp=$(mktemp "$dir/.$cmd.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	if [[ $cmd == e2e.test ]]; then
		CGO_ENABLED=0 go test -c -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" ./e2e
	elif [[ $cmd == agnhost ]]; then
		CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" k8s.io/kubernetes/test/images/agnhost
	else
		CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$cmd"
	fi
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dir/$cmd" # rename is atomic: no reader sees a half-written binary
	if [[ -n $stamp ]]; then echo "$stamp" >"$dir/.$cmd.stamp"; fi
	trap - EXIT
	echo "built $dir/$cmd in $((SECONDS - start))s"
done
