#!/usr/bin/env bash
# Indexer benchmark for `make bench`: sample documents indexed per second by
# the indexer vs a bare bulk loop of the same documents on the same node, and
# bytes on disk per raw sample after a force merge. Needs `make up`.
# Without arguments it measures two corpus shapes; with arguments they go to
# the program (-hosts -profiles -samples -raw -zipf -keep; go run ./bench -h).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! curl -sf -o /dev/null "${STACKSTREAM_TEST_OPENSEARCH_URL:-http://127.0.0.1:9200}"; then
	echo "indexer bench: OpenSearch is not reachable (run make up); skipped" >&2
	exit 0
fi
if [ $# -gt 0 ]; then
	exec go run ./bench "$@"
fi
go build -o /tmp/stackstream-indexer-bench.$$ ./bench
trap 'rm -f /tmp/stackstream-indexer-bench.$$' EXIT
echo "## busy hosts: 8 CPUs at 100 Hz, 300 (stack, process) pairs per 10 s profile"
/tmp/stackstream-indexer-bench.$$ -samples 300 -raw 50
echo
echo "## agent default: 8 CPUs at 19 Hz (1520 raw samples per 10 s profile), Zipf(1.1) stacks"
/tmp/stackstream-indexer-bench.$$ -samples 1520 -raw 1 -zipf 1.1
