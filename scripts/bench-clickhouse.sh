#!/usr/bin/env bash
# bench-clickhouse.sh: the ClickHouse sink's insert rate against
# clickhouse-client loading the same rows from a TabSeparated file, and the
# sink's conversion cost alone. Timings are printed, never asserted: the
# ratio target gets PASS/MISS and the script exits 0 whatever it says (non-zero
# only when something fails: an insert, a row count, the build).
#
#   scripts/bench-clickhouse.sh                  # 1M rows, median of 3 per side
#   ROWS=200000 REPEAT=1 scripts/bench-clickhouse.sh
#   CHBENCH_ARGS="-cpuprofile /tmp/chbench.prof" scripts/bench-clickhouse.sh
#   CHBENCH_ARGS="-dsn clickhouse://127.0.0.1:9000" scripts/bench-clickhouse.sh
#
# Steps:
#   1. go test ./sink/clickhouse/ -run '^$' -bench Convert
#      -benchtime ${ROWS}x: records -> columns -> a no-op connection (rows/s;
#      ConvertStreamEvents is the rate chbench shows, ConvertViolations the
#      widest rows).
#   2. test/chbench -rows $ROWS -repeat $REPEAT: starts its own
#      clickhouse-server (Debian 18.16, test/chtest) in a temporary
#      directory, inserts the rows through sink/clickhouse (ours) and with
#      clickhouse-client from a file (client), alternating, and prints median
#      seconds, rows/s and the ratio ours/client (target >= 0.8), with the
#      conversion-only rate from step 1.
set -euo pipefail

cd "$(dirname "$0")/.."

ROWS=${ROWS:-1000000}
REPEAT=${REPEAT:-3}
CACHE=${TMPDIR:-/tmp}/replaywatch-bench
read -r -a EXTRA <<<"${CHBENCH_ARGS:-}"

for bin in clickhouse-server clickhouse-client; do
	if ! command -v "$bin" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$bin && ! -x /usr/bin/$bin ]]; then
		echo "$bin not installed (apt-get install clickhouse-server clickhouse-client)" >&2
		exit 1
	fi
done

mkdir -p "$CACHE"
echo "== building test/chbench"
go build -o "$CACHE/chbench" ./test/chbench

echo "== machine"
echo "cores: $(nproc); cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows wall clock)"
go version

echo
echo "== conversion only: go test ./sink/clickhouse/ -run '^\$' -bench Convert -benchtime ${ROWS}x"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
go test ./sink/clickhouse/ -run '^$' -bench Convert -benchmem -benchtime "${ROWS}x" | tee "$TMP/convert"
CONVERT=$(awk '/^BenchmarkConvertStreamEvents/ { for (i = 2; i < NF; i++) if ($(i + 1) == "rows/s") print $i }' "$TMP/convert")
if [[ -z $CONVERT ]]; then
	echo "no rows/s in the benchmark output" >&2
	exit 1
fi
echo "conversion only (stream_events): $CONVERT rows/s"

echo
echo "== inserts: chbench -rows $ROWS -repeat $REPEAT ${EXTRA[*]}"
"$CACHE/chbench" -rows "$ROWS" -repeat "$REPEAT" -convert-rate "$CONVERT" "${EXTRA[@]}"
