#!/bin/sh
# Query API latency benchmark (make bench): generates 1 h of samples and 24 h
# of rollups for 100 simulated hosts in OpenSearch under a unique prefix,
# then prints p50/p99 of series, flamegraph and search. Flags: see
# `go run ./bench -h` (e.g. -hosts 100 -n 20). Needs OpenSearch
# (STACKSTREAM_TEST_OPENSEARCH_URL, default http://127.0.0.1:9200).
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench "$@"
