#!/usr/bin/env bash
# bench-memory.sh: replaywatch analyze's peak memory and time on the flood
# probes of test/floodprobe (huge session ids, open connections holding
# them, one stream of a million events, 200,000 sessions in under a
# second), at the sizes an attacker or a very busy node reaches, under
# --memory-limit, for this tree and, side by side in the same run, a
# baseline revision. Figures are printed, never asserted
# (cmd/replaywatch's TestFloodProbesHoldTheBudget and
# TestAgentFloodProbesHoldTheBudget assert smaller probes under smaller
# limits); it exits 0 whatever they say.
#
#   scripts/bench-memory.sh                      # this tree, --memory-limit 768MiB (the DaemonSet's)
#   BENCH_BASE=28cb324 scripts/bench-memory.sh   # and the last commit before the budget
#   BENCH_LIMIT=256MiB scripts/bench-memory.sh
#
# test/membench does the measuring (see its doc comment); the probes are
# written once into ${TMPDIR:-/tmp}/replaywatch-memory (about 3.5 GB). With
# clickhouse-server installed the stream probe also runs into ClickHouse.
set -euo pipefail

cd "$(dirname "$0")/.."

LIMIT=${BENCH_LIMIT:-768MiB}
BASE=${BENCH_BASE:-}
CACHE=${TMPDIR:-/tmp}/replaywatch-memory
mkdir -p "$CACHE"

echo "== building"
go build -o "$CACHE/replaywatch" ./cmd/replaywatch
go build -o "$CACHE/membench" ./test/membench
bins=(-bin "this tree=$CACHE/replaywatch")
if [[ -n $BASE ]]; then
	wt=$(mktemp -d)
	trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
	git worktree add -q --detach "$wt" "$BASE"
	(cd "$wt" && go build -o "$CACHE/replaywatch-base" ./cmd/replaywatch)
	bins+=(-bin "$BASE=$CACHE/replaywatch-base")
fi
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$CACHE/membench" "${bins[@]}" -limit "$LIMIT" -cache "$CACHE"
