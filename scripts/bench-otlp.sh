#!/usr/bin/env bash
# bench-otlp.sh: the OTLP input's throughput and memory, and the guard's
# cost per SSE event, by go test -bench on this machine. Figures are printed,
# never asserted.
#
#   scripts/bench-otlp.sh              # -benchtime 2s, median of 3
#   BENCH_TIME=5s BENCH_COUNT=5 scripts/bench-otlp.sh
#
# The spans are every fixture capture as the guard would have exported it
# (test/spanproj), renumbered per round as other clients.
#   assembly  spans consumed, settled, turned into observations and judged
#             by the detector, in-process, on one core (-cpu 1): spans/s
#             per core; B/trace is the heap a settling trace holds
#   export    the OpenTelemetry Go SDK's otlptracegrpc exporter sending as
#             fast as it can, in exports of 512 spans, to a gRPC server that
#             discards them (peer) and to replaywatch's spans pipeline
#             (receiver, assembler, detector): replaywatch / peer
#   guard     one 1,000-event SSE stream read through the bare transport,
#             the guard, and the guard with spans: ns per event
set -euo pipefail

cd "$(dirname "$0")/.."

TIME=${BENCH_TIME:-2s}
COUNT=${BENCH_COUNT:-3}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

bench() { # package, pattern, cpu
	go test -run '^$' -bench "$2" -benchtime "$TIME" -count "$COUNT" -cpu "$3" "$1" | tee -a "$OUT" | grep -E '^Benchmark' || true
}

echo "== spans through the assembler and the detector, one core"
bench ./pipeline 'BenchmarkSpanAssembly' 1
echo "== otlptracegrpc exporter to a discarding server and to replaywatch"
bench ./pipeline 'BenchmarkOTLPExport' "$(nproc)"
echo "== guard: ns per SSE event"
bench ./guard 'BenchmarkStream' "$(nproc)"

# median VALUE of the metric UNIT over the runs of benchmark NAME
median() {
	awk -v name="$1" -v unit="$2" '
		$1 ~ "^"name"(-[0-9]+)?$" { for (i = 3; i < NF; i++) if ($(i+1) == unit) print $i }' "$OUT" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)] }'
}

asm=$(median BenchmarkSpanAssembly/throughput spans/s)
held=$(median BenchmarkSpanAssembly/held B/trace)
peer=$(median BenchmarkOTLPExport/peer spans/s)
rw=$(median BenchmarkOTLPExport/replaywatch spans/s)
echo
echo "| figure | value |"
echo "|---|---|"
printf '| spans/s per core, assembler + detector (one core) | %.0f |\n' "$asm"
printf '| heap per settling trace | %.0f B |\n' "$held"
printf '| otlptracegrpc exporter to a discarding server (peer) | %.0f spans/s |\n' "$peer"
printf '| otlptracegrpc exporter to replaywatch | %.0f spans/s |\n' "$rw"
awk -v a="$rw" -v b="$peer" 'BEGIN { if (b > 0) printf "| replaywatch / peer | %.2fx |\n", a / b }'
for v in bare guard 'guard[+]spans'; do
	printf '| guard: %s | %s ns/event |\n' "${v/\[+\]/+}" "$(median "BenchmarkStream/$v" ns/event)"
done
