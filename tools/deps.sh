#!/usr/bin/env bash
# deps.sh installs the Debian packages that the kernel, testbed, benchmark
# and load tiers use, when they are missing. It holds the one list that
# `make test`, `make demo` and .ci/run share.
#
# Usage: tools/deps.sh test|demo
#   test  As root, installs what is missing. Without root, or without
#         apt-get, it says which tiers will skip and how to run them, and
#         exits 0 so that the rest of the suite runs.
#   demo  Needs root and Go; exits 2, saying what is missing, when it cannot
#         install it.
# Exits 1 when apt-get fails.
set -euo pipefail

mode=${1:-}
case $mode in
test | demo) ;;
*) echo "usage: $0 test|demo" >&2; exit 2 ;;
esac

# Each Debian package the tiers use, with a command it provides: the
# command's absence is what makes a package missing.
pkgs=(
	iproute2:ip           # network namespaces, veth, bridges (kernel tier)
	iptables:iptables     # NOTRACK and filter rules, kube-proxy's iptables mode
	nftables:nft          # kube-proxy's nftables mode
	conntrack:conntrack   # checks that pod DNS leaves no conntrack entry
	procps:sysctl         # sysctls inside node namespaces
	util-linux:unshare    # unshare, taskset, flock (Essential; listed for other bases)
	etcd-server:etcd      # the testbed's etcd
	dnsperf:dnsperf       # load for the benchmark and the comparison
	unbound:unbound       # a peer in the benchmark
	dnsmasq-base:dnsmasq  # a peer in the benchmark and the comparison
	prometheus:promtool   # promtool and the server: metrics, alert rules, dashboard queries (monitoring)
	libcap2-bin:capsh     # capsh and setcap: the backend binary's file capability (images)
	containerd:containerd    # the real nodes' container runtime (testbed)
	runc:runc                # the OCI runtime containerd starts (testbed)
	containernetworking-plugins:/usr/lib/cni/bridge  # pods' network on real nodes (testbed)
)

missing=()
for p in "${pkgs[@]}"; do
	pkg=${p%%:*} cmd=${p#*:}
	if [[ $cmd == /* ]]; then
		[[ -x $cmd ]] || missing+=("$pkg") # a program off PATH, by its path
		continue
	fi
	command -v "$cmd" >/dev/null 2>&1 || [[ -x /usr/sbin/$cmd || -x /sbin/$cmd ]] || missing+=("$pkg")
done

# skips tells a person running `make test` what will not run, and how to
# run it.
skips() {
	echo "make test: $1; these tiers will skip, each test saying why, and the summary at the end counts them:" >&2
	if [[ $(id -u) -ne 0 ]]; then
		echo "  - kernel tier: network namespaces, iptables, conntrack (frontend/nodenet, shared/netnstest, helm)" >&2
		echo "  - testbed tier: etcd, kube-apiserver, kube-proxy (testbed, backend, frontend/nodenet, helm, apicost)" >&2
		echo "  - load tier: the scenario smoke (loadtest/scenario)" >&2
	fi
	if ((${#missing[@]})); then
		echo "  - tests needing the Debian packages ${missing[*]}" >&2
	fi
	if [[ $(id -u) -ne 0 ]]; then
		echo "  To run them: as root, 'make test' installs what is missing (sudo make test)." >&2
	else
		echo "  To run them: install those packages, then run 'make test' again." >&2
	fi
}

if [[ $(id -u) -ne 0 ]]; then
	if [[ $mode == demo ]]; then
		echo "make demo: needs root (network namespaces, iptables, conntrack); run it as root, e.g. sudo make demo" >&2
		((${#missing[@]})) && echo "make demo: and these Debian packages: ${missing[*]}" >&2
		exit 2
	fi
	skips "not root (euid $(id -u))"
	exit 0
fi
if [[ $mode == demo ]] && ! command -v go >/dev/null 2>&1; then
	echo "make demo: needs Go 1.26 on PATH (/usr/local/go/bin)" >&2
	exit 2
fi
((${#missing[@]})) || exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	if [[ $mode == demo ]]; then
		echo "make demo: missing ${missing[*]} and no apt-get to install them" >&2
		exit 2
	fi
	skips "missing ${missing[*]} and no apt-get to install them"
	exit 0
fi
echo "installing: ${missing[*]}"
start=$SECONDS
if ! apt-get update -qq || ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
	echo "make $mode: apt-get could not install ${missing[*]}" >&2
	exit 1
fi
echo "installed in $((SECONDS - start))s"
