#!/bin/sh
# Builds etcd v3.6.8 — the etcd that k8s.io/kubernetes v1.36.3 requires — from
# the module graph of tools/k8s, into ~/.cache/nodedns/etcd-v3.6.8/etcd (once),
# and prints its path.
#
# Why: Debian's etcd-server 3.4.23 lacks the RequestWatchProgress feature, so
# kube-apiserver v1.36 refuses streaming lists (WatchList: "a watch stream was
# requested by the client but the required storage feature
# RequestWatchProgress is disabled") and serves consistent LISTs from etcd
# instead of its watch cache. The API-server cost study runs against this
# etcd (NODEDNS_ETCD) to measure what a current control plane does.
set -eu
version=v3.6.8
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../tools/k8s
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodedns/etcd-$version
out=$cache/etcd
if [ -x "$out" ]; then echo "$out"; exit 0; fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A throwaway module with tools/k8s's requirements, so etcd's dependencies
# resolve to the versions Kubernetes itself is built and tested with.
sed 's#^module .*#module etcdbuild#' "$tools/go.mod" > "$work/go.mod"
cp "$tools/go.sum" "$work/go.sum"
cat > "$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cd "$work"
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$out.tmp" . >&2
mv "$out.tmp" "$out"
echo "$out"
