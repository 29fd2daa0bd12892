#!/bin/sh
# Builds the two peers of the memory study (backend/memstudy_test.go) once
# into the cache and prints the environment that points the study at them:
#   - node-cache, NodeLocal DNSCache's binary, from a checkout of
#     kubernetes-sigs/node-local-dns (its vendor/ directory: the module is
#     not on the Go module proxy, and its k8s.io/kubernetes dependency
#     keeps `go install` from building it elsewhere);
#   - CoreDNS as released, every plugin of its plugin.cfg, from its Go
#     module through the module proxy.
# Cache: ${XDG_CACHE_HOME:-~/.cache}/nodedns. Source of node-cache:
# $NODEDNS_NODE_LOCAL_DNS_SRC, else <cache>/node-local-dns.
set -eu
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodedns
coredns_version=v1.15.0
src=${NODEDNS_NODE_LOCAL_DNS_SRC:-$cache/node-local-dns}
mkdir -p "$cache"

nodecache=$cache/node-cache
if [ ! -x "$nodecache" ]; then
	if [ ! -f "$src/cmd/node-cache/main.go" ]; then
		echo "peers.sh: no node-local-dns source in $src: git clone https://github.com/kubernetes-sigs/node-local-dns $src (or set NODEDNS_NODE_LOCAL_DNS_SRC)" >&2
		exit 1
	fi
	echo "peers.sh: building node-cache from $src" >&2
	(cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -mod=vendor -trimpath -ldflags '-s -w' -o "$nodecache.tmp" ./cmd/node-cache)
	mv "$nodecache.tmp" "$nodecache"
fi

coredns=$cache/coredns-$coredns_version
if [ ! -x "$coredns" ]; then
	echo "peers.sh: building CoreDNS $coredns_version from its module" >&2
	tmp=$(mktemp -d)
	CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags '-s -w' "github.com/coredns/coredns@$coredns_version"
	mv "$tmp/coredns" "$coredns"
	rmdir "$tmp"
fi

echo "NODEDNS_NODE_CACHE_BIN=$nodecache"
echo "NODEDNS_COREDNS_BIN=$coredns"
