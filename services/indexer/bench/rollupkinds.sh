#!/usr/bin/env bash
# Where a rollups index's bytes go: copies each (resolution, kind) group of
# documents of SOURCE (a rollups index kept by `go run ./bench/fleetbytes
# -keep`) into an index of its own created from TEMPLATE (default: the
# rollups template of this checkout), force-merges each to one segment and
# prints documents, bytes, bytes per document and bytes per raw sample of
# each group. The copies are deleted at the end. Needs curl and jq.
#
#   bench/rollupkinds.sh SOURCE RAW_SAMPLES [TEMPLATE]
#
# ONLY="1d/partition_tree 1h/fleet_head ..." copies those groups only
# (resolution/kind, space separated); "all" then sums those.
#
# Rollups keep their _source, so the copies hold the same documents.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
	echo "usage: $0 SOURCE RAW_SAMPLES [TEMPLATE]" >&2
	exit 2
fi
src=$1
raw=$2
template=${3:-../../schemas/indices/templates/rollups.json}
os=${STACKSTREAM_OPENSEARCH_URL:-http://127.0.0.1:9200}
prefix=ixkinds-$$-
body=$(jq -c '.template' "$template")
cleanup() { curl -s -XDELETE "$os/${prefix}*" >/dev/null || true; }
trap cleanup EXIT

groups=$(curl -sf "$os/$src/_search" -H 'content-type: application/json' -d '{"size":0,"aggs":{"g":{"composite":{"size":100,"sources":[{"r":{"terms":{"field":"resolution"}}},{"k":{"terms":{"field":"kind"}}}]}}}}' |
	jq -r '.aggregations.g.buckets[] | "\(.key.r) \(.key.k)"')
total=0
printf '%-22s %10s %12s %10s %14s\n' group documents bytes bytes/doc "bytes/raw sample"
while read -r res kind; do
	if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $res/$kind "* ]]; then
		continue
	fi
	dest="${prefix}${res}-${kind}"
	curl -sf -XPUT "$os/$dest" -H 'content-type: application/json' -d "$body" >/dev/null
	query=$(jq -cn --arg r "$res" --arg k "$kind" '{bool:{filter:[{term:{resolution:$r}},{term:{kind:$k}}]}}')
	echo "copying $res/$kind ..." >&2
	curl -sf --max-time 7200 -XPOST "$os/_reindex?wait_for_completion=true&refresh=true" -H 'content-type: application/json' \
		-d "{\"source\":{\"index\":\"$src\",\"query\":$query,\"size\":5000},\"dest\":{\"index\":\"$dest\"}}" >/dev/null
	curl -sf -XPOST "$os/$dest/_flush?force=true" >/dev/null
	curl -sf --max-time 7200 -XPOST "$os/$dest/_forcemerge?max_num_segments=1" >/dev/null
	sleep 11 # store stats are cached for 10 s
	read -r docs bytes < <(curl -sf "$os/_cat/indices/$dest?h=docs.count,pri.store.size&bytes=b")
	total=$((total + bytes))
	printf '%-22s %10d %12d %10.1f %14.3f\n' "$res/$kind" "$docs" "$bytes" "$(echo "$bytes / $docs" | bc -l)" "$(echo "$bytes / $raw" | bc -l)"
done <<<"$groups"
printf '%-22s %10s %12d %10s %14.3f\n' all "" "$total" "" "$(echo "$total / $raw" | bc -l)"
