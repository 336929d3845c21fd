#!/usr/bin/env bash
# The whole test suite, from a fresh clone. Installs what the tests need when it
# is missing (tshark, clickhouse-server/-client, zookeeper, prometheus for
# promtool, nginx, tcpdump, iproute2 and zip from Debian; the TypeScript SDK
# and chDB's libchdb.so from npm, the latter cached by scripts/fetch-chdb.sh)
# and runs: gofmt, go vet, staticcheck, every Go test (unit, spec, oracle,
# fixture regeneration, binary end-to-end, ClickHouse servers, the live
# agent on loopback and in network namespaces, the Grafana plugin's
# build.sh with its npm ci), the race detector over capture,
# decode, detector, the sinks, the guard and the end-to-end tests (with the product
# binary they run built with -race), and a short run of every fuzz target.
# Live capture needs root (CAP_NET_RAW); CI runs as root.
#
# Environment:
#   FUZZTIME   time per fuzz target (default 10s; 0 skips fuzzing)
#   CI=true    missing tools are an error, never a skip
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
FUZZTIME="${FUZZTIME:-10s}"

# Each step is logged with the time since the start (m:ss): CI wants the
# suite within 20 minutes on 2 cores, and this says where the time goes.
log() { printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		log "need root to run: $*"; return 1; fi
}

apt_updated=
apt_install() {
	if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v tshark >/dev/null; then
	log "installing tshark (Debian package) for the HTTP decoding oracle"
	# wireshark-common asks whether non-root users may capture; answer no.
	echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections || true
	apt_install tshark
fi

if ! command -v clickhouse-server >/dev/null && [ ! -x /usr/sbin/clickhouse-server ] ||
	! command -v clickhouse-client >/dev/null; then
	log "installing clickhouse-server and clickhouse-client (Debian packages) for the ClickHouse tests"
	apt_install clickhouse-server clickhouse-client
	# test/chtest starts its own servers. The package's postinst starts
	# its service only where an init system allows it (not in containers
	# without one); stop that one, matched by its clickhouse user.
	if [ -d /run/systemd/system ]; then
		as_root systemctl disable --now clickhouse-server >/dev/null 2>&1 || true
	else
		as_root start-stop-daemon --stop --quiet --oknodo --retry=TERM/30/KILL/5 \
			--user clickhouse --exec /usr/sbin/clickhouse-server || true
	fi
fi

if [ ! -d /usr/share/zookeeper ]; then
	log "installing zookeeper (Debian package, pulls a Java runtime) for the ClickHouse cluster tests"
	apt_install zookeeper
fi

if ! command -v promtool >/dev/null; then
	log "installing prometheus (Debian package) for promtool: rules/prometheus check and unit tests"
	apt_install prometheus
	# The package's postinst may start a Prometheus server; the tests need
	# only promtool. Stop that one where an init system started it.
	if [ -d /run/systemd/system ]; then as_root systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi

if ! command -v nginx >/dev/null; then
	log "installing nginx-light (Debian package) for the end-to-end test of a reverse proxy on the client's host"
	apt_install nginx-light
	# The tests run their own nginx on a free port; stop the package's.
	if [ -d /run/systemd/system ]; then as_root systemctl disable --now nginx >/dev/null 2>&1 || true; fi
fi

missing=
command -v tcpdump >/dev/null || missing="$missing tcpdump"
command -v ip >/dev/null || missing="$missing iproute2"
if [ -n "$missing" ]; then
	log "installing$missing (Debian) for the live-capture tests: BPF filter compilation, network namespaces"
	apt_install $missing
fi

# dashboards/plugin's test runs its build.sh (npm ci, webpack, the backend
# cross-compiled for linux/amd64 and arm64), which zips the plugin with zip
# (or python3 when zip is missing).
if ! command -v zip >/dev/null; then
	log "installing zip (Debian package) for the Grafana plugin's zip (dashboards/plugin/build.sh)"
	apt_install zip
fi

if [ ! -d test/fixturegen/ts/node_modules ] && [ -f test/fixturegen/ts/package-lock.json ]; then
	log "installing the TypeScript MCP SDK (npm ci) for fixture regeneration"
	(cd test/fixturegen/ts && npm ci --no-audit --no-fund --loglevel=error)
fi

log "fetching chDB (npm @chdb/lib-linux-x64-gnu) for the ClickHouse SQL tests (test/chdbtest; ~180 MB once, then cached)"
REPLAYWATCH_CHDB_LIB=$(scripts/fetch-chdb.sh)
export REPLAYWATCH_CHDB_LIB

# Under CI nothing may be missing from here on: a test that cannot run must
# fail, never skip (test/testenv.InCI is the tests' side of this rule).
if [ -n "${CI:-}" ]; then
	missing=
	for tool in tshark clickhouse-client tcpdump ip promtool nginx node npm; do
		command -v "$tool" >/dev/null || missing="$missing $tool"
	done
	command -v clickhouse-server >/dev/null || [ -x /usr/sbin/clickhouse-server ] || missing="$missing clickhouse-server"
	[ -d /usr/share/zookeeper ] || missing="$missing zookeeper"
	[ -d test/fixturegen/ts/node_modules ] || missing="$missing node_modules(test/fixturegen/ts)"
	if [ -n "$missing" ]; then
		log "CI: still missing after installing:$missing"; exit 1
	fi
	if [ "$(id -u)" != 0 ]; then
		log "CI: the suite must run as root (live capture, network namespaces)"; exit 1
	fi
fi

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './test/fixturegen/ts/node_modules/*'))
if [ -n "$unformatted" ]; then
	log "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi

log "go vet"
go vet ./...

log "staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# The end-to-end tests of the real binary that the race step below runs
# (built with -race: against ClickHouse paused, refusing and slow, sharing a
# spool, receiving spans) spend their time waiting on servers and clocks,
# not on the CPU: they run once, under the race detector, and go test skips
# them here. The names are cmd/replaywatch's alone.
E2E_UNDER_RACE='^(TestBinary|TestAgentToClickHouse|TestAgentSeesRollingDeployInNamespaces|TestAgentShutdownWithinBudget|TestSpoolSharedByTwoRunsAndAnAgent|TestAnalyzeStopsOnSIGTERM|TestAnalyzeExitSaysWhereTheRowsAre|TestHostileWireStrings|TestOTLPMatchesPcap|TestAnalyzeSpans)$'

# go vet above ran every analyzer over these packages and their tests: the
# smaller vet pass go test makes before testing would only repeat it, so
# every go test below turns it off (-vet=off).
log "go test"
go test -count=1 -vet=off -timeout 15m -skip "$E2E_UNDER_RACE" ./...

# The Grafana plugin's build (npm ci, typecheck, webpack, the backend for
# linux/amd64 and arm64, the zip) on its own: it loads both cores, which
# the timing-sensitive tests above must not share.
log "go test (the Grafana plugin's build.sh)"
REPLAYWATCH_PLUGIN_BUILD=1 go test -count=1 -vet=off -timeout 15m -run TestBuildScript ./dashboards/plugin

# The race detector over the core packages (capture's workers and rings,
# decode's workers and merger, the detector, the sinks' sender) and the
# end-to-end tests: analyze in process over every fixture, and the real
# binary, built with -race (buildBinary), as analyze and as the agent
# against ClickHouse paused, refusing and slow, sharing a spool, and
# receiving spans; the spans path over every fixture. capture
# runs alone: its live tests pace two rings against each other. The soak
# and flood tests are not among them: they bound the agent's memory, which
# the race detector's shadow memory multiplies.
log "go test -race (decode, detector, sink, guard)"
go test -race -count=1 -vet=off -timeout 10m ./decode/... ./detector/... ./sink/... ./guard/...
log "go test -race (capture)"
go test -race -count=1 -vet=off -timeout 5m ./capture/...
log "go test -race (end to end)"
go test -race -count=1 -vet=off -timeout 10m -run 'TestFixtureSpecs|TestCrowdSDKDoubleCharges$|TestSharedStoreLeaks|Spans' ./pipeline
go test -race -count=1 -vet=off -timeout 10m -run "$E2E_UNDER_RACE" ./cmd/replaywatch

if [ "$FUZZTIME" != 0 ]; then
	# Every fuzz target, briefly: the seed corpora always run in go test above;
	# this finds new crashes. Longer runs: FUZZTIME=5m scripts/test.sh
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			log "fuzz $pkg $target ($FUZZTIME)"
			# A short minimization: minimizing a new input can outlast a
			# short -fuzztime and fail the run with "context deadline
			# exceeded" although nothing failed (seen with FuzzSpoolFile,
			# and with FuzzChunked on a busy machine). Such a run, with no
			# failing input written, is run once more; a real crash
			# ("Failing input written to testdata/fuzz/...") fails at once.
			out=$(go test -vet=off -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=100x "$pkg" 2>&1) && { printf '%s\n' "$out"; continue; }
			printf '%s\n' "$out"
			if printf '%s' "$out" | grep -q 'context deadline exceeded' && ! printf '%s' "$out" | grep -q 'Failing input'; then
				log "fuzz $pkg $target: the fuzzer ran out of time without a failing input; once more"
				go test -vet=off -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=100x "$pkg"
			else
				exit 1
			fi
		done
	done
fi
log "all tests passed"
