#!/usr/bin/env bash
# bench-scaling.sh: replaywatch analyze's scaling laws, measured in one run
# (test/membench -scaling): time and peak memory on the benchmark capture
# of scripts/bench.sh at 1x, 4x and 16x its size (test/benchgen, 200 MB
# by default, cached in ${TMPDIR:-/tmp}/replaywatch-bench), with
# --session-idle-timeout 30s so that sessions expire within the capture
# (time should grow linearly, memory stay flat); and on 1,000 to 1,000,000
# sessions started within a second and left idle (memory should grow with
# them up to the detector's share of --memory-limit, and stay flat after).
# Figures are printed, never asserted; it exits 0 whatever they say.
#
#   scripts/bench-scaling.sh                       # 200MB base, --memory-limit 768MiB
#   BENCH_SIZE=50MB BENCH_LIMIT=256MiB scripts/bench-scaling.sh
set -euo pipefail

cd "$(dirname "$0")/.."

SIZE=${BENCH_SIZE:-200MB}
LIMIT=${BENCH_LIMIT:-768MiB}
BENCH=${TMPDIR:-/tmp}/replaywatch-bench
CACHE=${TMPDIR:-/tmp}/replaywatch-memory
mkdir -p "$BENCH" "$CACHE"

num=${SIZE%MB}
if ! [[ $num =~ ^[0-9]+$ ]]; then
	echo "BENCH_SIZE must be a number of MB (e.g. 200MB)" >&2
	exit 1
fi
captures=()
for k in 1 4 16; do
	size="$((num * k))MB"
	f=$BENCH/mcp-$size.pcap
	if [[ ! -s $f ]]; then
		echo "== building $f (go run ./test/benchgen -size $size)"
		go run ./test/benchgen -out "$f.part" -size "$size"
		mv "$f.part" "$f"
	fi
	captures+=("${k}x=$f")
done

echo "== building"
go build -o "$CACHE/replaywatch" ./cmd/replaywatch
go build -o "$CACHE/membench" ./test/membench
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$CACHE/membench" -scaling -bin "this tree=$CACHE/replaywatch" -limit "$LIMIT" -cache "$CACHE" \
	-captures "$(IFS=,; echo "${captures[*]}")"
