#!/usr/bin/env bash
# build.sh builds gotestsum from this module (the version go.mod pins) into
# a version-keyed cache directory, unless it is already there, and prints
# the binary's path on stdout. It needs only Go and the Go module proxy,
# and no root: `make test` calls it as any user. On two cores with empty
# Go caches it takes about 20 s; cached, it returns at once.
#
# Usage: tools/gotestsum/build.sh
# Cache: $NODEDNS_TOOLS_BIN_DIR, else ${XDG_CACHE_HOME:-~/.cache}/nodedns/gotestsum-<version>
set -euo pipefail
cd "$(dirname "$0")"

version=$(go list -m -f '{{.Version}}' gotest.tools/gotestsum)
dir=${NODEDNS_TOOLS_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodedns/gotestsum-$version}
bin=$dir/gotestsum
mkdir -p "$dir"

# One build at a time per cache directory; a second caller waits, then
# finds the binary cached.
exec 9>"$dir/.lock"
flock 9

if [[ ! -x $bin ]]; then
	echo "building gotestsum $version into $dir" >&2
	tmp=$(mktemp "$dir/.gotestsum.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$tmp" gotest.tools/gotestsum
	chmod 0755 "$tmp"
	mv -f "$tmp" "$bin" # rename is atomic: no reader sees a half-written binary
	trap - EXIT
fi
echo "$bin"
