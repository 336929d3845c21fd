#!/usr/bin/env bash
# render-dashboards.sh: redraws docs/img/*.png and docs/dashboards.md, the
# pictures of the Overview and Session dashboards, from the dashboards' own
# queries (go run ./dashboards/pictures; see its package comment).
#
# Needs what the dashboards' query tests need, and installs it when missing:
#   - clickhouse-server and clickhouse-client (Debian packages): the fixtures
#     are analysed by the real binary into a ClickHouse 18.16 server that
#     test/chtest starts in a temporary folder (the package's own service
#     is stopped, as scripts/test.sh does);
#   - chDB's libchdb.so (npm @chdb/lib-linux-x64-gnu, ~180 MB once, then
#     cached) from scripts/fetch-chdb.sh: the panels' SQL runs on it
#     (ClickHouse 26.x).
# Root (or sudo) only for the apt-get install.
#
#   scripts/render-dashboards.sh            # writes docs/img and docs/dashboards.md
#   OUT=/tmp/img DOC= scripts/render-dashboards.sh   # elsewhere, without the page
#
# Commit the result when a dashboard, the fixtures or the renderer changed.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
OUT="${OUT-docs/img}"
DOC="${DOC-docs/dashboards.md}"

log() { printf '==> %s\n' "$*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		log "need root to run: $*"; return 1; fi
}

if ! command -v clickhouse-server >/dev/null && [ ! -x /usr/sbin/clickhouse-server ] ||
	! command -v clickhouse-client >/dev/null; then
	log "installing clickhouse-server and clickhouse-client (Debian packages)"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		clickhouse-server clickhouse-client >/dev/null
	# The renderer starts its own server; stop the one the package may start.
	if [ -d /run/systemd/system ]; then
		as_root systemctl disable --now clickhouse-server >/dev/null 2>&1 || true
	else
		as_root start-stop-daemon --stop --quiet --oknodo --retry=TERM/30/KILL/5 \
			--user clickhouse --exec /usr/sbin/clickhouse-server || true
	fi
fi

log "fetching chDB (scripts/fetch-chdb.sh; cached after the first time)"
REPLAYWATCH_CHDB_LIB=$(scripts/fetch-chdb.sh)
export REPLAYWATCH_CHDB_LIB

if [ -n "$OUT" ]; then
	# Only the renderer's files: a panel renamed or removed leaves no stale image.
	rm -f "$OUT"/overview-*.png "$OUT"/session-*.png
fi
log "rendering the dashboards into ${OUT} ${DOC:+and $DOC}"
go run ./dashboards/pictures -out "$OUT" -doc "$DOC"

total=0
for f in "$OUT"/*.png; do
	size=$(stat -c %s "$f")
	total=$((total + size))
	if [ "$size" -gt 153600 ]; then log "warning: $f is $size bytes (keep each under 150 KB)"; fi
done
log "$(ls "$OUT"/*.png | wc -l) images, $total bytes"
if [ "$total" -gt 1572864 ]; then log "warning: the images total over 1.5 MB"; fi
