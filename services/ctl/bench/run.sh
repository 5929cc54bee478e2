#!/usr/bin/env bash
# Whole-pipeline scale benchmark for make bench (issue 15): stackctl
# loadgen's simulated fleet through Kafka, OpenSearch and bin/'s
# symbolizer, indexer, rollup and query, under throw-away topic, index,
# template and group names (b15-<time>), deleted at the end. Prints CPU per
# profile of every consumer, a stepped search for the largest fleet with lag
# bounded, end-to-end latency from a probe host, and the rollup total vs
# the produced CPU total, a soak (RSS and lag over time) and horizontal
# scaling (1-3 instances of each consumer, one killed and restarted per
# round). Needs make build and make up. Takes about 25 minutes, 60 with
# make bench's SOAK=30m; flags (go run ./bench -h) go to the program.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(cd ../.. && pwd)
if ! curl -sf -o /dev/null "${STACKSTREAM_TEST_OPENSEARCH_URL:-http://127.0.0.1:9200}"; then
	echo "ctl bench: OpenSearch is not reachable (run make up); skipped" >&2
	exit 0
fi
for b in stackctl stackstream-symbolizer stackstream-indexer stackstream-rollup stackstream-query; do
	[ -x "$repo/bin/$b" ] || { echo "ctl bench: $repo/bin/$b missing (run make build)" >&2; exit 1; }
done
# SOAK is part F's length: make bench sets the issue's 30m; unset or 0
# skips it.
exec go run ./bench -repo "$repo" -soak "${SOAK:-0}" "$@"
