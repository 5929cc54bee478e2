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
# The copies are made by _reindex from SOURCE's _source, so SOURCE must keep
# every field there: a rollups index of schema 4 or later leaves the stack
# rollups' stack_id and stack_values out of it (schemas/opensearch.md), and
# is refused. A TEMPLATE leaving fields out of _source keeps each copied
# document's whole source for peer recovery (_recovery_source) until the
# retention leases pass it and a merge runs: every copy gets a marker
# document (not counted, its own segment), a flush, 70 s, a flush and a
# merge before its size is read, as fleetbytes does.
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

if curl -sf "$os/$src/_mapping" | jq -e '.[].mappings._source.excludes // [] | length > 0' >/dev/null; then
	echo "$src leaves fields out of _source (rollups schema 4 or later): a _reindex copy would lose them; measure the index itself (fleetbytes)" >&2
	exit 1
fi
groups=$(curl -sf "$os/$src/_search" -H 'content-type: application/json' -d '{"size":0,"aggs":{"g":{"composite":{"size":100,"sources":[{"r":{"terms":{"field":"resolution"}}},{"k":{"terms":{"field":"kind"}}}]}}}}' |
	jq -r '.aggregations.g.buckets[] | "\(.key.r) \(.key.k)"')
copied=()
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
	curl -sf -XPUT "$os/$dest/_doc/rollupkinds-marker?refresh=true" -H 'content-type: application/json' -d '{"@timestamp":"2000-01-01T00:00:00Z"}' >/dev/null
	copied+=("$res/$kind")
done <<<"$groups"
# No merge before the wait: the marker must stay a segment of its own, so
# that the merge after it rewrites every copy.
curl -sf -XPOST "$os/${prefix}*/_flush" >/dev/null
sleep 70 # the retention leases pass the copies
curl -sf -XPOST "$os/${prefix}*/_flush?force=true" >/dev/null
curl -sf --max-time 7200 -XPOST "$os/${prefix}*/_forcemerge?max_num_segments=1" >/dev/null
curl -sf -XPOST "$os/${prefix}*/_refresh" >/dev/null
sleep 11 # store stats are cached for 10 s
total=0
printf '%-22s %10s %12s %10s %14s\n' group documents bytes bytes/doc "bytes/raw sample"
for g in "${copied[@]}"; do
	dest="${prefix}${g/\//-}"
	read -r docs bytes < <(curl -sf "$os/_cat/indices/$dest?h=docs.count,pri.store.size&bytes=b")
	docs=$((docs - 1)) # the marker
	total=$((total + bytes))
	printf '%-22s %10d %12d %10.1f %14.3f\n' "$g" "$docs" "$bytes" "$(echo "$bytes / $docs" | bc -l)" "$(echo "$bytes / $raw" | bc -l)"
done
printf '%-22s %10s %12d %10s %14.3f\n' all "" "$total" "" "$(echo "$total / $raw" | bc -l)"
