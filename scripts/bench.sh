#!/usr/bin/env bash
# bench.sh: replaywatch throughput against tshark and against a raw read of
# the same capture. Timings are printed, never asserted: targets get
# PASS/MISS next to them and the script exits 0 whatever they say.
#
#   scripts/bench.sh                   # 200MB capture, best of 3
#   BENCH_SIZE=50MB BENCH_RUNS=1 scripts/bench.sh
#   BENCH_GO=0 scripts/bench.sh        # skip the go test -bench pass
#   BENCH_BASE=519ae52 scripts/bench.sh # also analyze as built from that revision, in the same run
#
# The capture is built once by test/benchgen and cached under
# ${TMPDIR:-/tmp}/replaywatch-bench (delete it to rebuild). Measured, each
# best of BENCH_RUNS by wall clock, peak RSS the largest seen (GNU time):
#   replaywatch analyze --format json --progress never [--workers 1] FILE
#   rawread -stage raw FILE     capture.RawRead: pcap read + layer decode only
#   rawread -stage capture FILE + TCP reassembly (streams discarded)
#   rawread -stage decode FILE  + HTTP/SSE/JSON-RPC decode, no detector
#   tshark -r FILE -o http.desegment_body:FALSE -Y http
#   (BENCH_BASE) replaywatch analyze of that revision, the same flags
# The capture and decode rows say where analyze's time goes. cpu/Gb is CPU
# seconds per Gbit of capture: the cores a 1 Gbit/s link would keep busy.
# Targets (issue 16): analyze throughput >= 25x tshark's; analyze time <= 3x
# the raw read's, with both cores.
# They are judged on wall clock, as specified, and again on CPU seconds
# (user + sys), which a busy shared machine distorts less.
set -euo pipefail

cd "$(dirname "$0")/.."

SIZE=${BENCH_SIZE:-200MB}
RUNS=${BENCH_RUNS:-3}
GOBENCH=${BENCH_GO:-1}
BASE=${BENCH_BASE:-}
CACHE=${TMPDIR:-/tmp}/replaywatch-bench
CAPTURE=$CACHE/mcp-$SIZE.pcap

mkdir -p "$CACHE"

if [[ ! -s $CAPTURE ]]; then
	echo "== building $CAPTURE (go run ./test/benchgen -size $SIZE)"
	go run ./test/benchgen -out "$CAPTURE.part" -size "$SIZE"
	mv "$CAPTURE.part" "$CAPTURE"
fi

echo "== building binaries"
go build -o "$CACHE/replaywatch" ./cmd/replaywatch
go build -o "$CACHE/rawread" ./test/benchgen/rawread
if [[ -n $BASE ]]; then
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$BASE"
	(cd "$wt" && go build -o "$CACHE/replaywatch-base" ./cmd/replaywatch)
	git worktree remove --force "$wt"
fi

GNUTIME=
if [[ -x /usr/bin/time ]] && /usr/bin/time -f %e true >/dev/null 2>&1; then
	GNUTIME=/usr/bin/time
fi
HAVE_TSHARK=0
if command -v tshark >/dev/null 2>&1; then
	HAVE_TSHARK=1
fi

BYTES=$(stat -c %s "$CAPTURE")
MB=$(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1e6 }')

echo "== machine"
echo "cores: $(nproc); cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows wall clock)"
echo "$(go version)"
if ((HAVE_TSHARK)); then tshark --version 2>/dev/null | head -1; fi
echo "capture: $CAPTURE ($MB MB)"
[[ -z $GNUTIME ]] && echo "note: GNU time not found (apt-get install time): no peak RSS, no CPU seconds"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# measure NAME OKCODES CMD...: runs CMD RUNS times (stdout discarded) and
# records the best wall time, that run's CPU seconds, and the largest peak
# RSS in KiB as results[NAME]="wall cpu rss". OKCODES is a regex of exit codes
# that count as success (analyze exits 1 when it finds violations).
declare -A results
measure() {
	local name=$1 ok=$2
	shift 2
	local best="" bestcpu="-" maxrss="-" i rc wall cpu rss
	echo "-- $name: $*"
	for ((i = 1; i <= RUNS; i++)); do
		rc=0
		if [[ -n $GNUTIME ]]; then
			"$GNUTIME" -f "%e %U %S %M" -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" || rc=$?
			read -r wall u s rss <"$TMP/time"
			cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
		else
			local TIMEFORMAT=%R
			{ time "$@" >/dev/null 2>"$TMP/err"; } 2>"$TMP/time" || rc=$?
			wall=$(tail -1 "$TMP/time")
			cpu="-"
			rss="-"
		fi
		if [[ ! $rc =~ ^($ok)$ ]]; then
			echo "   run $i failed (exit $rc):"
			sed 's/^/   | /' "$TMP/err" | tail -20
			results[$name]="- - -"
			return 0
		fi
		if [[ $cpu == - ]]; then
			echo "   run $i: ${wall}s wall"
		else
			echo "   run $i: ${wall}s wall, ${cpu}s cpu, peak RSS ${rss} KiB"
		fi
		if [[ -z $best ]] || awk -v a="$wall" -v b="$best" 'BEGIN { exit !(a < b) }'; then
			best=$wall
			bestcpu=$cpu
		fi
		if [[ $rss != - ]] && { [[ $maxrss == - ]] || ((rss > maxrss)); }; then
			maxrss=$rss
		fi
	done
	results[$name]="$best $bestcpu $maxrss"
}

echo "== timing (best of $RUNS)"
# Warm the page cache so the first measured tool does not pay for the disk.
cat "$CAPTURE" >/dev/null
measure raw 0 "$CACHE/rawread" -stage raw "$CAPTURE"
measure capture-only 0 "$CACHE/rawread" -stage capture "$CAPTURE"
measure decode-only 0 "$CACHE/rawread" -stage decode "$CAPTURE"
measure analyze 0\|1 "$CACHE/replaywatch" analyze --format json --progress never "$CAPTURE"
measure analyze-w1 0\|1 "$CACHE/replaywatch" analyze --workers 1 --format json --progress never "$CAPTURE"
if [[ -n $BASE ]]; then
	measure analyze-base 0\|1 "$CACHE/replaywatch-base" analyze --format json --progress never "$CAPTURE"
fi
if ((HAVE_TSHARK)); then
	measure tshark 0 tshark -r "$CAPTURE" -o http.desegment_body:FALSE -Y http
else
	echo "-- tshark: not installed (apt-get install tshark); no comparison"
	results[tshark]="- - -"
fi

field() { # field NAME INDEX
	local -a v
	read -r -a v <<<"${results[$1]}"
	echo "${v[$2]}"
}
RAW=$(field raw 0)
TSHARK=$(field tshark 0)
RAWCPU=$(field raw 1)
TSHARKCPU=$(field tshark 1)

echo
echo "== results: $MB MB, $(nproc) cores, load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n $BASE ]]; then
	echo "analyze-base: analyze built from $BASE"
fi
printf '%-13s %7s %8s %7s %8s %9s %7s %6s %9s %7s %8s  %s\n' tool MB seconds MB/s "x tshark" "x raw" cpu-s cpu/Gb "cpu x ts" "cpu x raw" "RSS MiB" "targets (wall; cpu)"
names=(analyze analyze-w1)
if [[ -n $BASE ]]; then
	names+=(analyze-base)
fi
for name in "${names[@]}" decode-only capture-only raw tshark; do
	wall=$(field "$name" 0)
	cpu=$(field "$name" 1)
	rss=$(field "$name" 2)
	awk -v name="$name" -v mb="$MB" -v wall="$wall" -v cpu="$cpu" -v rss="$rss" \
		-v raw="$RAW" -v tshark="$TSHARK" -v rawcpu="$RAWCPU" -v tsharkcpu="$TSHARKCPU" '
	function num(x) { return x != "-" && x + 0 > 0 }
	# vs tshark: how many times faster (higher is better).
	function faster(t, ref) { return (num(t) && num(ref)) ? sprintf("%.1f", ref / t) : "-" }
	# vs raw: how many times the raw read'"'"'s time (lower is better).
	function slower(t, ref) { return (num(t) && num(ref)) ? sprintf("%.1f", t / ref) : "-" }
	function verdict(v, ok) { return v == "-" ? "n/a" : (ok ? "PASS" : "MISS") }
	BEGIN {
		vt = faster(wall, tshark); vr = slower(wall, raw)
		ct = faster(cpu, tsharkcpu); cr = slower(cpu, rawcpu)
		t = ""
		if (name ~ /^analyze/) {
			t = "tshark>=25x: " verdict(vt, vt + 0 >= 25) "; " verdict(ct, ct + 0 >= 25)
			t = t "  time<=3x raw: " verdict(vr, vr != "-" && vr + 0 <= 3) "; " verdict(cr, cr != "-" && cr + 0 <= 3)
		}
		# CPU seconds per Gbit of capture (MB x 8 / 1000 Gbit).
		pg = num(cpu) ? sprintf("%.2f", cpu / (mb * 8 / 1000)) : "-"
		printf "%-13s %7s %8s %7s %8s %9s %7s %6s %9s %7s %8s  %s\n", name, mb, (num(wall) ? wall : "-"),
			(num(wall) ? sprintf("%.1f", mb / wall) : "-"), vt, vr, cpu, pg, ct, cr,
			(num(rss) ? sprintf("%.0f", rss / 1024) : "-"), t
	}'
done

if [[ $GOBENCH == 1 ]]; then
	echo
	echo "== go test -bench (packages that have benchmarks, -benchtime 200ms)"
	mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -r -n1 dirname | sort -u)
	if ((${#pkgs[@]})); then
		go test -run '^$' -bench . -benchmem -benchtime 200ms "${pkgs[@]}" || echo "(go test -bench failed; see above)"
	else
		echo "(none found)"
	fi
fi
