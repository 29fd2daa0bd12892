#!/usr/bin/env bash
# Installs the Debian packages `make demo` needs, when missing.
# Exits 2, saying what is missing, when it cannot (not root, no apt-get).
set -euo pipefail

# Package that provides each tool the demo runs.
declare -A pkg_of=(
	[ip]=iproute2 [iptables]=iptables [iptables-save]=iptables [nft]=nftables
	[conntrack]=conntrack [etcd]=etcd-server [dnsmasq]=dnsmasq-base [dnsperf]=dnsperf
	[sysctl]=procps
)
missing=()
for tool in "${!pkg_of[@]}"; do
	command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/sbin/$tool ]] || missing+=("${pkg_of[$tool]}")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')

if [[ $(id -u) -ne 0 ]]; then
	echo "make demo: needs root (network namespaces, iptables, conntrack); run it as root, e.g. sudo make demo" >&2
	((${#missing[@]})) && echo "make demo: and these Debian packages: ${missing[*]}" >&2
	exit 2
fi
if ! command -v go >/dev/null 2>&1; then
	echo "make demo: needs Go 1.26 on PATH (/usr/local/go/bin)" >&2
	exit 2
fi
if ((${#missing[@]})); then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "make demo: missing ${missing[*]} and no apt-get to install them" >&2
		exit 2
	fi
	echo "installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
