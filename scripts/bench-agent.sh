#!/usr/bin/env bash
# bench-agent.sh: replaywatch agent's live capture, measured by replaying a
# large capture of real MCP traffic onto a veth interface with tcpreplay
# while the agent watches it. Figures are printed, never asserted: the script
# exits 0 whatever they say (non-zero only when something breaks: a build,
# the namespace, the agent not starting or not stopping cleanly).
#
#   scripts/bench-agent.sh                            # 200MB capture, 3 full-speed runs, paced search
#   BENCH_SIZE=50MB BENCH_RUNS=1 scripts/bench-agent.sh
#   BENCH_MBPS="100 200 300" scripts/bench-agent.sh   # paced runs at these rates instead of a search
#   BENCH_MBPS=none scripts/bench-agent.sh            # no paced runs
#   BENCH_CAPTURE=tx scripts/bench-agent.sh           # capture on the sending veth end
#   BENCH_AGENT_ARGS="--workers 1" scripts/bench-agent.sh
#   BENCH_NICE=-10 scripts/bench-agent.sh             # agent and tcpreplay ahead of other work on a shared machine
#   BENCH_SENDER=agentbench scripts/bench-agent.sh     # send with "agentbench send" (64 frames per sendmmsg call)
#   BENCH_PACED_TRIES=5 scripts/bench-agent.sh         # at most this many rates tried by the search (default 5)
#   BENCH_PRELOAD=0 scripts/bench-agent.sh             # tcpreplay without -K (reads the file as it sends)
#                                                      # instead of tcpreplay (one frame per call): a faster sender,
#                                                      # the "tcpreplay" figures below are then its own
#   BENCH_AGENT_CPUS=1 BENCH_SENDER_CPUS=0 scripts/bench-agent.sh
#                                                      # the agent on CPU 1 alone, tcpreplay on CPU 0 (taskset -c):
#                                                      # what the agent sustains on one core, the sender not in its way
#
# Needs root (a network namespace, packet sockets) and iproute2; installs
# tcpreplay with apt-get when it is missing. What it does:
#   1. Builds replaywatch and test/agentbench, and the capture of
#      scripts/bench.sh (test/benchgen, cached in
#      ${TMPDIR:-/tmp}/replaywatch-bench/mcp-$BENCH_SIZE.pcap). benchgen's
#      traffic has no violations, so agentbench weave spreads the sample
#      capture (cmd/replaywatch/testdata/sample) and the fixture captures
#      (pipeline/testdata/fixtures) over it (each on its own 172.31.0.K
#      address): the replayed file, mcp-$BENCH_SIZE-fixtures.pcap in
#      ${TMPDIR:-/tmp}/replaywatch-agentbench, holds every violation kind.
#      The fixtures alone make a second, small capture.
#   2. Creates the network namespace rw-agentbench with a veth pair
#      rwab-tx/rwab-rx in it (IPv6 off, so the kernel sends nothing of its
#      own on them). tcpreplay sends on rwab-tx; the agent captures on
#      rwab-rx (BENCH_CAPTURE=tx: on rwab-tx). The host's network is never
#      touched; the namespace is deleted on exit, Ctrl-C included.
#   3. Each run: starts "replaywatch agent --interface rwab-rx --format json
#      --listen 127.0.0.1:19464" in the namespace, waits for /readyz, runs
#      "tcpreplay -K --topspeed -i rwab-tx FILE" (or --mbps=N) while
#      agentbench watch scrapes /metrics every 100 ms until the capture,
#      decode and detector counters stop moving, and reads the agent's CPU
#      time (/proc/PID/stat utime + stime) and peak RSS (VmHWM). Then it
#      stops the agent with SIGTERM and compares its JSON Lines with
#      "replaywatch analyze --format json FILE" (agentbench compare: MATCH or
#      the differences; for a paced run, analyze of FILE retimed to the
#      rate, agentbench retime, since the sender keeps no capture timing),
#      and prints the limits the agent hit. Beside the agent's figures it prints tcpreplay's own
#      (and its CPU time, with GNU time), the share of the cores that other
#      work took during the run (/proc/stat), and the longest time the 100 ms
#      poller was kept from running: drops follow the machine's load.
#   4. Runs the fixtures alone at full speed (an exact-once capture check),
#      then the big capture BENCH_RUNS times at full speed, then paced runs:
#      from 80% of the full-speed rate down by 0.6x steps until a run has no
#      kernel drops and the agent kept pace, reading its last packet less
#      than 0.3 s after tcpreplay sent it (BENCH_MBPS overrides the search).
#      A full-speed run can be free of drops only because the agent's rings
#      (64 MiB per worker) hold what it has not read yet: its "lag" says so.
# Results go to ${TMPDIR:-/tmp}/replaywatch-agentbench/run-*.{jsonl,err,metrics,series,tcpreplay,compare}
# (series: every 100 ms scrape, to see when drops happened).
set -euo pipefail

cd "$(dirname "$0")/.."

SIZE=${BENCH_SIZE:-200MB}
RUNS=${BENCH_RUNS:-3}
MBPS=${BENCH_MBPS:-auto}
PACED_TRIES=${BENCH_PACED_TRIES:-5}
SIDE=${BENCH_CAPTURE:-rx}
PRELOAD=${BENCH_PRELOAD:-1}
NICE=${BENCH_NICE:-0}
SENDER=${BENCH_SENDER:-tcpreplay}
case $SENDER in
tcpreplay | agentbench) ;;
*)
	echo "BENCH_SENDER=$SENDER: want tcpreplay or agentbench" >&2
	exit 2
	;;
esac
# taskset -c CPU lists for the agent and for tcpreplay; empty: not pinned.
AGENT_CPUS=${BENCH_AGENT_CPUS:-}
SENDER_CPUS=${BENCH_SENDER_CPUS:-}
AGENT_PIN=()
SENDER_PIN=()
[[ -n $AGENT_CPUS ]] && AGENT_PIN=(taskset -c "$AGENT_CPUS")
[[ -n $SENDER_CPUS ]] && SENDER_PIN=(taskset -c "$SENDER_CPUS")
read -r -a AGENT_ARGS <<<"${BENCH_AGENT_ARGS:-}"
CACHE=${TMPDIR:-/tmp}/replaywatch-bench
WORK=${TMPDIR:-/tmp}/replaywatch-agentbench
CAPTURE=$CACHE/mcp-$SIZE.pcap
MAIN=$WORK/mcp-$SIZE-fixtures.pcap
FIXTURES=$WORK/fixtures.pcap
NS=rw-agentbench
TX=rwab-tx
RX=rwab-rx
PORT=19464
case $SIDE in
rx) CAPIF=$RX ;;
tx) CAPIF=$TX ;;
*)
	echo "BENCH_CAPTURE=$SIDE: want rx or tx" >&2
	exit 2
	;;
esac

if ((EUID != 0)); then
	echo "bench-agent.sh needs root (network namespaces, packet sockets)" >&2
	exit 1
fi
if ! command -v tcpreplay >/dev/null 2>&1; then
	echo "== installing tcpreplay (apt-get install -y tcpreplay)"
	apt-get install -y tcpreplay >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y tcpreplay >/dev/null; }
fi
for bin in ip curl; do
	command -v "$bin" >/dev/null 2>&1 || {
		echo "$bin not found (apt-get install iproute2 curl)" >&2
		exit 1
	}
done

AGENT_PID=
WATCH_PID=
REPLAY_PID=
# stop PID: SIGTERM to a process this script started and to its children
# (GNU time runs tcpreplay as its child), SIGKILL if still there after 5 s.
stop() {
	local pid=$1 c
	kill -0 "$pid" 2>/dev/null || return 0
	for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
		kill -TERM "$c" 2>/dev/null || true
	done
	kill -TERM "$pid" 2>/dev/null || true
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.5
	done
	kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
	local pid
	for pid in $REPLAY_PID $WATCH_PID $AGENT_PID; do
		stop "$pid"
	done
	ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

mkdir -p "$CACHE" "$WORK"
if [[ ! -s $CAPTURE ]]; then
	echo "== building $CAPTURE (go run ./test/benchgen -size $SIZE)"
	go run ./test/benchgen -out "$CAPTURE.part" -size "$SIZE"
	mv "$CAPTURE.part" "$CAPTURE"
fi
echo "== building binaries"
go build -o "$WORK/replaywatch" ./cmd/replaywatch
go build -o "$WORK/agentbench" ./test/agentbench
BIN=$WORK/replaywatch
AB=$WORK/agentbench

echo "== building the replayed captures (agentbench weave)"
FIXTURE_FILES=(cmd/replaywatch/testdata/sample/rolling-deploy.pcap pipeline/testdata/fixtures/*.pcap)
"$AB" weave -out "$FIXTURES" "${FIXTURE_FILES[@]}" | { grep -v skipped || true; }
"$AB" weave -base "$CAPTURE" -out "$MAIN" "${FIXTURE_FILES[@]}" | { grep -v skipped || true; }

GNUTIME=
if [[ -x /usr/bin/time ]] && /usr/bin/time -f %e true >/dev/null 2>&1; then
	GNUTIME=/usr/bin/time
fi
TCK=$(getconf CLK_TCK)

echo "== machine"
echo "cores: $(nproc); cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); kernel $(uname -r)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (tcpreplay and the agent share the cores; other work slows both); nice $NICE"
echo "sender: $SENDER; agent on CPUs: ${AGENT_CPUS:-any}; sender on CPUs: ${SENDER_CPUS:-any}"
go version
tcpreplay --version 2>&1 | sed -n 1p # not head: tcpreplay would get SIGPIPE (pipefail)
for f in "$FIXTURES" "$MAIN"; do
	echo "capture: $f ($(awk -v b="$(stat -c %s "$f")" 'BEGIN { printf "%.1f", b / 1e6 }') MB)"
done

echo "== network namespace $NS: veth $TX -> $RX, agent on $CAPIF"
ip netns del "$NS" 2>/dev/null || true
ip netns add "$NS"
ip -n "$NS" link set lo up
ip netns exec "$NS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
ip -n "$NS" link add "$TX" type veth peer name "$RX"
ip -n "$NS" link set "$TX" up
ip -n "$NS" link set "$RX" up

nsx() { ip netns exec "$NS" "$@"; }
# metric FILE NAME: the value of a family in a scrape, summed over labels.
metric() {
	awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.0f", s }' "$1"
}
watched() { awk -v k="$1" '$1 == k { print $2 }' "$2"; } # watched NAME FILE: a value agentbench watch printed
# cpustat: "busy steal total" clock ticks of all CPUs since boot (/proc/stat).
cpustat() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6 - $9, $9, t; exit }' /proc/stat; }
ifstat() { nsx cat "/sys/class/net/$1/statistics/$2"; }

# The offline reference: analyze once per file.
declare -A ANALYZE_CPU
analyze_ref() {
	local f=$1 ref=$WORK/analyze-$(basename "$1" .pcap)
	local rc=0
	if [[ -n $GNUTIME ]]; then
		"$GNUTIME" -f "%e %U %S %M" -o "$ref.time" "$BIN" analyze --format json --progress never "$f" >"$ref.jsonl" 2>"$ref.err" || rc=$?
	else
		"$BIN" analyze --format json --progress never "$f" >"$ref.jsonl" 2>"$ref.err" || rc=$?
		echo "- - - -" >"$ref.time"
	fi
	if ((rc > 1)); then
		echo "analyze $f failed (exit $rc):" >&2
		cat "$ref.err" >&2
		exit 1
	fi
	local wall u s rss
	# GNU time writes "Command exited with non-zero status 1" first when
	# analyze finds violations: the figures are on the last line.
	read -r wall u s rss < <(tail -1 "$ref.time")
	ANALYZE_CPU[$f]=$(awk -v u="$u" -v s="$s" 'BEGIN { if (u == "-") print "-"; else printf "%.2f", u + s }')
	echo "analyze $(basename "$f"): ${wall}s wall, ${ANALYZE_CPU[$f]} CPU-s, peak RSS $((${rss/-/0} / 1024)) MiB; $(tail -1 "$ref.jsonl" |
		sed -E 's/.*"packets":([0-9]+),"bytes":([0-9]+).*"mcp_sessions":([0-9]+).*"violations":([0-9]+),"unknown_outcomes":([0-9]+),"unverifiable":([0-9]+).*/\1 packets, \2 bytes, \3 sessions, \4 violations, \5 unknown outcomes, \6 unverifiable/')"
}

# paced_ref FILE RATE: sets REF to the reference of a paced run: analyze of
# FILE retimed to RATE (agentbench retime), made once per file and rate. A
# paced sender keeps none of the capture's timing, and the detector's time
# windows (a proxy's hop within a second, the requests of a second it
# remembers) see what the wire's times say: analyze of the file as captured
# sets aside some of the woven fixtures' identical first requests as a
# proxy's hops (their clients' addresses serve MCP too), where the agent,
# given the same requests in a fraction of the time, sees more of them than
# a second's memory holds, and judges them.
paced_ref() {
	local f=$1 rate=$2 ref=$WORK/analyze-$(basename "$1" .pcap)-at-$2
	REF=$ref.jsonl
	[[ -s $REF ]] && return
	"$AB" retime -mbps "$rate" -out "$ref.pcap" "$f"
	local rc=0
	"$BIN" analyze --format json --progress never "$ref.pcap" >"$REF" 2>"$ref.err" || rc=$?
	rm -f "$ref.pcap"
	if ((rc > 1)); then
		echo "analyze of $(basename "$f") retimed to $rate Mbit/s failed (exit $rc):" >&2
		cat "$ref.err" >&2
		exit 1
	fi
}

# run_once LABEL FILE [TCPREPLAY OPTIONS...]: one agent run; appends a row to RESULTS
# and sets LAST_DROPS (kernel drops + packets that never reached the socket)
# and LAST_MBPS (tcpreplay's rate).
RESULTS=()
run_once() {
	local label=$1 file=$2
	shift 2
	local out=$WORK/run-$label rate=top
	[[ ${1:-} == --mbps=* ]] && rate=${1#--mbps=}
	rm -f "$out".*
	echo
	local send=(tcpreplay "$@" -i "$TX")
	if [[ $SENDER == agentbench ]]; then
		send=("$AB" send -i "$TX")
		if [[ $rate != top ]]; then
			send+=(-mbps "$rate")
		fi
	fi
	echo "-- $label: ${send[*]##*/} $(basename "$file")"
	# Not through nsx: a backgrounded function is a subshell, and $! must be
	# the agent itself (ip netns exec execs it) for /proc and SIGTERM.
	ip netns exec "$NS" nice -n "$NICE" "${AGENT_PIN[@]}" "$BIN" agent --interface "$CAPIF" --format json --listen "127.0.0.1:$PORT" --log-level warn "${AGENT_ARGS[@]}" \
		>"$out.jsonl" 2>"$out.err" &
	AGENT_PID=$!
	local i
	for ((i = 0; i < 100; i++)); do
		if nsx curl -sf --max-time 1 "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
			break
		fi
		if ! kill -0 "$AGENT_PID" 2>/dev/null; then
			echo "the agent exited before it was ready:" >&2
			cat "$out.err" >&2
			exit 1
		fi
		sleep 0.1
	done
	if ((i == 100)); then
		echo "the agent was not ready after 10 s" >&2
		exit 1
	fi
	local base_rxd base_txd
	base_rxd=$(ifstat "$RX" rx_dropped)
	base_txd=$(ifstat "$TX" tx_dropped)
	# The watcher scrapes /metrics every 100 ms until tcpreplay is done and
	# the counters have stood still for a second.
	ip netns exec "$NS" "$AB" watch -url "http://127.0.0.1:$PORT/metrics" -pid "$AGENT_PID" -clk-tck "$TCK" \
		-done "$out.replayed" -out "$out.metrics" -series "$out.series" >"$out.watch" 2>&1 &
	WATCH_PID=$!
	local timer=()
	if ((PRELOAD)) && [[ $SENDER == tcpreplay ]]; then
		send+=(-K)
	fi
	if [[ -n $GNUTIME ]]; then
		timer=("$GNUTIME" -f "%U %S" -o "$out.replaytime")
	fi
	local stat0
	stat0=$(cpustat)
	# In the background and waited for, so that Ctrl-C is handled at once.
	ip netns exec "$NS" nice -n "$NICE" "${timer[@]}" "${SENDER_PIN[@]}" "${send[@]}" "$file" >"$out.tcpreplay" 2>&1 &
	REPLAY_PID=$!
	if ! wait "$REPLAY_PID"; then
		echo "$SENDER failed:" >&2
		cat "$out.tcpreplay" >&2
		exit 1
	fi
	REPLAY_PID=
	touch "$out.replayed"
	if ! wait "$WATCH_PID"; then
		WATCH_PID=
		echo "agentbench watch failed:" >&2
		cat "$out.watch" >&2
		exit 1
	fi
	WATCH_PID=
	local stat1
	stat1=$(cpustat)
	local rxd txd
	rxd=$(($(ifstat "$RX" rx_dropped) - base_rxd))
	txd=$(($(ifstat "$TX" tx_dropped) - base_txd))
	kill -TERM "$AGENT_PID"
	local rc=0
	wait "$AGENT_PID" || rc=$?
	AGENT_PID=
	if ((rc != 0)); then
		echo "the agent exited $rc after SIGTERM:" >&2
		tail -20 "$out.err" >&2
		exit 1
	fi

	# tcpreplay's own figures.
	local sent sbytes ssec smbps spps failed
	read -r sent sbytes ssec < <(sed -nE 's/^Actual: ([0-9]+) packets \(([0-9]+) bytes\) sent in ([0-9.]+) seconds.*/\1 \2 \3/p' "$out.tcpreplay")
	read -r smbps spps < <(sed -nE 's/^Rated: [0-9.]+ Bps, ([0-9.]+) Mbps, ([0-9.]+) pps.*/\1 \2/p' "$out.tcpreplay")
	failed=$(sed -nE 's/^[[:space:]]*Failed packets:[[:space:]]*([0-9]+).*/\1/p' "$out.tcpreplay")
	local t_first t_last cpu0 cpu1 sys0 sys1 hwm
	t_first=$(watched t_first "$out.watch")
	t_last=$(watched t_last "$out.watch")
	cpu0=$(watched cpu_start "$out.watch")
	cpu1=$(watched cpu_end "$out.watch")
	sys0=$(watched sys_start "$out.watch")
	sys1=$(watched sys_end "$out.watch")
	hwm=$(watched hwm_kib "$out.watch")
	local stall rcpu=0 other
	stall=$(watched max_gap "$out.watch")
	if [[ -s $out.replaytime ]]; then
		rcpu=$(awk '{ s = $1 + $2 } END { print s + 0 }' "$out.replaytime")
	fi
	# The machine's CPU during the run that was neither the agent's nor
	# tcpreplay's, as a share of all cores; and the hypervisor's steal.
	other=$(awk -v a="$stat0" -v b="$stat1" -v agent="$cpu0 $cpu1" -v r="$rcpu" -v tck="$TCK" -v n="$(nproc)" 'BEGIN {
		split(a, x); split(b, y); split(agent, c)
		wall = (y[3] - x[3]) / n / tck
		o = (y[1] - x[1]) / tck - (c[2] - c[1]) - r
		if (o < 0) o = 0
		if (wall <= 0) wall = 0.01
		printf "%.0f %.1f %.1f", 100 * o / (wall * n), 100 * (y[2] - x[2]) / tck / (wall * n), wall
	}')
	local pk bytes kpk drops dups gaps
	pk=$(metric "$out.metrics" replaywatch_capture_packets_total)
	bytes=$(metric "$out.metrics" replaywatch_capture_bytes_total)
	kpk=$(metric "$out.metrics" replaywatch_capture_kernel_packets_total)
	drops=$(metric "$out.metrics" replaywatch_capture_kernel_drops_total)
	dups=$(metric "$out.metrics" replaywatch_capture_duplicates_total)
	gaps=$(metric "$out.metrics" replaywatch_capture_gaps_total)
	REF=$WORK/analyze-$(basename "$file" .pcap).jsonl
	if [[ $rate != top ]]; then
		paced_ref "$file" "$rate"
	fi
	"$AB" compare -analyze "$REF" -agent "$out.jsonl" >"$out.compare"
	local fverdict averdict
	fverdict=$(sed -nE 's/^findings .*: (MATCH|DIFF)$/\1/p' "$out.compare")
	averdict=$(sed -nE 's/^all records .*: (MATCH|DIFF)$/\1/p' "$out.compare")

	echo "   tcpreplay: $sent packets ($sbytes bytes) in ${ssec}s: $smbps Mbps, $spps pps; failed $failed"
	local stats
	stats="-v pk=$pk -v bytes=$bytes -v kpk=$kpk -v drops=$drops -v sent=$sent -v t0=$t_first -v tl=$t_last -v c0=$cpu0 -v c1=$cpu1 -v hwm=$hwm"
	# shellcheck disable=SC2086 # $stats is a list of awk options
	awk $stats -v dups="$dups" -v gaps="$gaps" -v rxd="$rxd" -v txd="$txd" -v s0="$sys0" -v s1="$sys1" -v ssec="$ssec" 'BEGIN {
		d = tl - t0; if (d <= 0) d = 0.05; cpu = c1 - c0
		printf "   agent: %d packets read, %d bytes; kernel: %d packets, %d drops (%.2f%%); never at the socket: %d (veth drops: rx %d, tx %d); duplicates %d, capture gaps reported by then %d\n",
			pk, bytes, kpk, drops, kpk ? 100 * drops / kpk : 0, sent - kpk, rxd, txd, dups, gaps
		printf "   agent: read for %.2fs (first to last packet, +-0.1s; %.2fs after tcpreplay'"'"'s last): %.0f packets/s, %.1f MB/s, %.1f Mbit/s\n",
			d, d - ssec, pk / d, bytes / d / 1e6, bytes * 8 / d / 1e6
		printf "   agent: CPU %.2fs (%.2f user, %.2f system): %.2f CPU-s per Gbit of traffic (= cores busy at 1 Gbit/s); peak RSS %.0f MiB\n",
			cpu, cpu - (s1 - s0), s1 - s0, cpu / (bytes * 8 / 1e9), hwm / 1024
	}'
	if ((kpk == sent && pk + drops == kpk)); then
		echo "   every packet sent reached the capture socket once"
	fi
	read -r other_pct steal_pct window <<<"$other"
	echo "   machine over ${window}s: tcpreplay ${rcpu} CPU-s; other work ${other_pct}% of the $(nproc) cores, steal ${steal_pct}%; the 100 ms poller was held up to ${stall}s"
	if [[ $rate != top ]]; then
		echo "   against analyze of the file retimed to $rate Mbit/s (agentbench retime): what the agent saw"
	else
		echo "   against analyze of the file as captured: at full speed the agent sees its time squeezed into ${ssec}s,"
		echo "   and the detector's time windows judge other traffic (findings lost or changed: not a fault by itself)"
	fi
	sed 's/^/   | /' "$out.compare"
	# Limits the agent hit change what it judges (a full hop memory judges
	# a proxy's hop as a request of its own): say which.
	awk '$1 ~ /^replaywatch_limit_hits_total\{/ && $NF > 0 { sub(/^replaywatch_limit_hits_total/, "", $1); l = l " " $1 "=" $NF }
		END { if (l != "") print "   agent limits hit:" l }' "$out.metrics"
	local row
	# shellcheck disable=SC2086
	row=$(awk $stats -v label="$label" -v rate="$rate" -v ssec="$ssec" -v smbps="$smbps" -v fv="$fverdict" -v av="$averdict" \
		-v other="$other_pct" -v stall="$stall" 'BEGIN {
		d = tl - t0; if (d <= 0) d = 0.05; cpu = c1 - c0
		# CPU per Gbit only means something on a large run.
		pergb = bytes >= 10e6 ? sprintf("%.2f", cpu / (bytes * 8 / 1e9)) : "-"
		printf "%-12s %-5s %8d %7.2f %7.1f %8d %8.0f %6.1f %5.2f %7d %6.2f %5d %6.2f %6s %7.0f %6s %6.2f  %-5s %-5s",
			label, rate, sent, ssec, smbps, pk, pk / d, bytes / d / 1e6, d - ssec, drops, kpk ? 100 * drops / kpk : 0, sent - kpk,
			cpu, pergb, hwm / 1024, other "%", stall, fv, av
	}')
	RESULTS+=("$row")
	LAST_DROPS=$((drops + sent - kpk))
	LAST_MBPS=$smbps
	LAST_KEPT_PACE=0
	if awk -v t0="$t_first" -v tl="$t_last" -v s="$ssec" 'BEGIN { exit !(tl - t0 - s < 0.3) }'; then
		LAST_KEPT_PACE=1
	fi
	# The fastest runs of the big capture without a drop, by tcpreplay's
	# rate: any, and one where the agent kept pace (lag under 0.3 s) rather
	# than living on its rings.
	if [[ $file == "$MAIN" ]] && ((LAST_DROPS == 0)); then
		if [[ -z $BEST_CLEAN ]] || awk -v a="$smbps" -v b="${BEST_CLEAN%% *}" 'BEGIN { exit !(a > b) }'; then
			BEST_CLEAN="$smbps $spps $label $fverdict $averdict"
		fi
		if ((LAST_KEPT_PACE)) && { [[ -z $BEST_PACE ]] || awk -v a="$smbps" -v b="${BEST_PACE%% *}" 'BEGIN { exit !(a > b) }'; }; then
			BEST_PACE="$smbps $spps $label $fverdict $averdict"
		fi
	fi
}
BEST_CLEAN=
BEST_PACE=

echo
echo "== offline reference: replaywatch analyze --format json"
analyze_ref "$FIXTURES"
analyze_ref "$MAIN"
cat "$MAIN" >/dev/null # warm the page cache (tcpreplay -K reads it all first anyway)

echo
echo "== full speed (tcpreplay --topspeed)"
run_once fixtures "$FIXTURES" --topspeed
TOP_MBPS=
TOP_CLEAN=0
for ((r = 1; r <= RUNS; r++)); do
	run_once "top-$r" "$MAIN" --topspeed
	if [[ -z $TOP_MBPS ]] || awk -v a="$LAST_MBPS" -v b="$TOP_MBPS" 'BEGIN { exit !(a > b) }'; then
		TOP_MBPS=$LAST_MBPS
	fi
	if ((LAST_DROPS == 0)); then
		TOP_CLEAN=$((TOP_CLEAN + 1))
	fi
done

SUSTAINED=
if [[ $MBPS != none ]]; then
	echo
	echo "== paced (tcpreplay --mbps)"
	if [[ $MBPS == auto ]]; then
		rate=$(awk -v m="${TOP_MBPS:-100}" 'BEGIN { printf "%d", m * 0.8 }')
		for ((t = 1; t <= PACED_TRIES && rate >= 5; t++)); do
			run_once "paced-$rate" "$MAIN" "--mbps=$rate"
			if ((LAST_DROPS == 0 && LAST_KEPT_PACE)); then
				SUSTAINED=$rate
				break
			fi
			rate=$(awk -v m="$rate" 'BEGIN { printf "%d", m * 0.6 }')
		done
	else
		for rate in $MBPS; do
			run_once "paced-$rate" "$MAIN" "--mbps=$rate"
			if ((LAST_DROPS == 0 && LAST_KEPT_PACE)); then
				SUSTAINED=$rate
			fi
		done
	fi
fi

echo
echo "== results: $(basename "$MAIN"), agent on $CAPIF, $(nproc) cores, load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %-5s %8s %7s %7s %8s %8s %6s %5s %7s %6s %5s %6s %6s %7s %6s %6s  %-5s %-5s\n' \
	run mbps sent send-s send-Mb agent-pk pk/s MB/s lag drops drop% lost cpu-s cpu/Gb RSS-MiB other stall find all
for row in "${RESULTS[@]}"; do
	echo "$row"
done
echo "(sent, send-s, send-Mb: tcpreplay's figures; agent-pk: packets the agent read; pk/s, MB/s: read from the first"
echo " packet sent to the last read; lag: seconds the agent read on after tcpreplay's last packet (above ~0.3 s it fell"
echo " behind and lived on its rings); drops: the kernel's ring drops; lost: sent but never at the socket; cpu-s: the"
echo " agent's user+sys; cpu/Gb: CPU seconds per Gbit of traffic, the cores it needs at 1 Gbit/s; other: the machine's"
echo " CPU used by neither the agent nor tcpreplay, as a share of all cores; stall: the longest time a 100 ms poller in"
echo " the namespace was kept from running, in seconds; find: violations and unknown outcomes against analyze; all:"
echo " also resumes, sessions and unverifiable checks)"
awk -v c="${ANALYZE_CPU[$MAIN]}" -v b="$(tail -1 "$WORK/analyze-$(basename "$MAIN" .pcap).jsonl" | sed -nE 's/.*"bytes":([0-9]+).*/\1/p')" \
	'BEGIN { if (c != "-" && b > 0) printf "analyze on the same file, offline: %.2f CPU-s, %.2f s per Gbit\n", c, c / (b * 8 / 1e9) }'
if ((RUNS > 0)); then
	echo "full speed: $TOP_CLEAN of $RUNS runs without drops; tcpreplay reached ${TOP_MBPS} Mbps at best"
fi
if [[ -n $SUSTAINED ]]; then
	echo "paced: no drops, agent kept pace at --mbps=$SUSTAINED (tcpreplay's achieved rate is in the table: it falls short of the asked rate when the cores are busy)"
elif [[ $MBPS != none ]]; then
	echo "paced: every rate tried had drops or left the agent behind"
fi
if [[ -n $BEST_CLEAN ]]; then
	read -r m p l fv av <<<"$BEST_CLEAN"
	echo "fastest without drops: $m Mbps, $p packets/s ($l); findings against analyze: $fv, all records: $av"
else
	echo "fastest without drops: no run of $(basename "$MAIN") was free of drops"
fi
if [[ -n $BEST_PACE ]]; then
	read -r m p l fv av <<<"$BEST_PACE"
	echo "sustained (no drops, kept pace): $m Mbps, $p packets/s ($l); findings against analyze: $fv, all records: $av"
else
	echo "sustained (no drops, kept pace): none of the runs"
fi
