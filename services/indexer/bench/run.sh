#!/usr/bin/env bash
# Indexer benchmark for `make bench`: sample documents indexed per second by
# the indexer vs a bare bulk loop of the same documents on the same node, and
# bytes on disk per raw sample after a force merge. Needs `make up`.
# Without arguments it measures two corpus shapes, each two ways:
#   shared: every process on every core, so the indexer's own CPU is taken
#           from OpenSearch (it is not, where the indexer runs on its own
#           machine);
#   pinned: OpenSearch on CPU 0, the writer (bare loop or indexer) and Kafka
#           on the others: does one indexer keep a node of equal size busy?
#           Needs the local services' pid files (make up) and 2+ CPUs.
# With arguments they go to the program (go run ./bench -h).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! curl -sf -o /dev/null "${STACKSTREAM_TEST_OPENSEARCH_URL:-http://127.0.0.1:9200}"; then
	echo "indexer bench: OpenSearch is not reachable (run make up); skipped" >&2
	exit 0
fi
if [ $# -gt 0 ]; then
	exec go run ./bench "$@"
fi
bench=/tmp/stackstream-indexer-bench.$$
go build -o "$bench" ./bench
run=../../.run
os_pid=$(cat "$run/opensearch/opensearch.pid" 2>/dev/null || true)
kafka_pid=$(cat "$run/kafka/kafka.pid" 2>/dev/null || true)
cpus=$(nproc)
all="0-$((cpus - 1))"
pin() { taskset -a -p -c "$2" "$1" >/dev/null; }
unpin() {
	if [ -n "$os_pid" ]; then pin "$os_pid" "$all" || true; fi
	if [ -n "$kafka_pid" ]; then pin "$kafka_pid" "$all" || true; fi
}
trap 'unpin; rm -f "$bench"' EXIT

# measure NAME ARGS...: the shared run, then the pinned one (no store size:
# the same documents as the shared run).
measure() {
	local name=$1
	shift
	echo "## $name, shared cores"
	"$bench" "$@"
	echo
	if [ -z "$os_pid" ] || [ -z "$kafka_pid" ] || [ "$cpus" -lt 2 ] || ! command -v taskset >/dev/null; then
		echo "## $name, pinned: skipped (needs the pid files of make up, 2+ CPUs and taskset)"
		return
	fi
	echo "## $name, pinned: OpenSearch on CPU 0; the writer and Kafka on CPUs 1-$((cpus - 1))"
	pin "$os_pid" 0
	pin "$kafka_pid" "1-$((cpus - 1))"
	taskset -c "1-$((cpus - 1))" "$bench" -size=false "$@"
	unpin
	echo
}
measure "busy hosts: 8 CPUs at 100 Hz, 300 (stack, process) pairs per 10 s profile" -profiles 360 -samples 300 -raw 50
measure "agent default: 8 CPUs at 19 Hz (1520 raw samples per 10 s profile), Zipf(1.1) stacks" -profiles 240 -samples 1520 -raw 1 -zipf 1.1
