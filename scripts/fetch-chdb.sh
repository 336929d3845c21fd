#!/usr/bin/env bash
# fetch-chdb.sh: the embedded ClickHouse engine (libchdb.so) for the tests that
# run our SQL on a current ClickHouse (test/chdbtest). Prints the path of
# the library on stdout and nothing else; progress goes to stderr.
#
# The library comes from the npm package @chdb/lib-linux-x64-gnu at the pinned
# version below, fetched with `npm pack` (npm checks the tarball against the
# registry's integrity) and checked again here against the pinned integrity.
# It is cached, once, under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/replaywatch/chdb/<version>/libchdb.so
# A second run finds it there and downloads nothing. The tarball is ~180 MB,
# the library ~570 MB. Delete the folder to fetch again.
#
# Changing the version: edit CHDB_VERSION and CHDB_INTEGRITY below (the package's
# dist.integrity, `npm view @chdb/lib-linux-x64-gnu@VERSION dist.integrity`)
# together, and chdbtest.PinnedVersion in test/chdbtest to the same
# version (a test checks that they agree).
set -euo pipefail

CHDB_PACKAGE=@chdb/lib-linux-x64-gnu
CHDB_VERSION=26.7.3-stable.1
CHDB_INTEGRITY=sha512-XP97mMqnc5tZpKQywR8N7cLTsHNiTmHr30pC5mzo3jWmukjKn2IBa60c2B/gWUNcuFjOMjWoorQICCqBVj5wpw==

log() { printf '==> %s\n' "$*" >&2; }

dir="${XDG_CACHE_HOME:-$HOME/.cache}/replaywatch/chdb/$CHDB_VERSION"
lib="$dir/libchdb.so"
if [ -f "$lib" ]; then
	echo "$lib"
	exit 0
fi

if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
	log "fetch-chdb.sh: $CHDB_PACKAGE is for Linux x86_64 (glibc) only, not $(uname -s)/$(uname -m)"
	exit 1
fi
if ! command -v npm >/dev/null; then
	log "fetch-chdb.sh: needs npm (Debian package npm)"
	exit 1
fi

parent=$(dirname "$dir")
mkdir -p "$parent"
# Everything is built in a scratch folder beside the cache entry and renamed
# into place at the end, so an interrupted run leaves no half library behind.
tmp=$(mktemp -d "$parent/.fetch-$CHDB_VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log "downloading $CHDB_PACKAGE@$CHDB_VERSION (~180 MB) into $dir"
# A private npm cache: the tarball is not kept twice.
(cd "$tmp" && npm pack "$CHDB_PACKAGE@$CHDB_VERSION" --cache "$tmp/npm-cache" \
	--no-audit --no-fund --loglevel=error >/dev/null)
tarball=$(find "$tmp" -maxdepth 1 -name '*.tgz' -print -quit)
if [ -z "$tarball" ]; then
	log "fetch-chdb.sh: npm pack left no tarball"
	exit 1
fi

got=$(node -e '
const h = require("crypto").createHash("sha512");
require("fs").createReadStream(process.argv[1])
	.on("data", (d) => h.update(d))
	.on("end", () => process.stdout.write("sha512-" + h.digest("base64")));
' "$tarball")
if [ "$got" != "$CHDB_INTEGRITY" ]; then
	log "fetch-chdb.sh: $tarball has integrity $got, want $CHDB_INTEGRITY"
	exit 1
fi

mkdir "$tmp/out"
tar -xzf "$tarball" -C "$tmp/out" --strip-components=1 package/libchdb.so package/package.json
if [ ! -s "$tmp/out/libchdb.so" ]; then
	log "fetch-chdb.sh: $tarball has no package/libchdb.so"
	exit 1
fi
echo "$CHDB_INTEGRITY" >"$tmp/out/INTEGRITY"

# Another run may have finished first: keep whichever landed.
if ! mv -T "$tmp/out" "$dir" 2>/dev/null && [ ! -f "$lib" ]; then
	log "fetch-chdb.sh: cannot move the library into $dir"
	exit 1
fi
echo "$lib"
