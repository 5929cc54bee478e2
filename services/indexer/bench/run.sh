#!/usr/bin/env bash
# Indexer benchmark for `make bench`: samples indexed per second by the
# indexer vs a bare bulk loop of the same documents on the same node, and
# bytes on disk per raw sample after a force merge. Needs `make up`.
# Arguments go to the program: -hosts N -profiles N -keep.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! curl -sf -o /dev/null "${STACKSTREAM_TEST_OPENSEARCH_URL:-http://127.0.0.1:9200}"; then
	echo "indexer bench: OpenSearch is not reachable (run make up); skipped" >&2
	exit 0
fi
exec go run ./bench "$@"
