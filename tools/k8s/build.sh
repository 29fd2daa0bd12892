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
	kube-apiserver | kube-proxy | kubelet | kube-controller-manager | kube-scheduler | kubectl) ;;
	*) echo "build.sh: unknown binary $cmd" >&2; exit 2 ;;
	esac
	if [[ -x "$dir/$cmd" ]]; then
		echo "$dir/$cmd: cached"
		continue
	fi
	echo "building $cmd $version into $dir (the first build takes minutes)"
	start=$SECONDS
	tmp=$(mktemp "$dir/.$cmd.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$cmd"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dir/$cmd" # rename is atomic: no reader sees a half-written binary
	trap - EXIT
	echo "built $dir/$cmd in $((SECONDS - start))s"
done
