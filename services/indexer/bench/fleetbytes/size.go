package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// mergedSizes force-merges every index of the run to one segment and
// returns them with their store sizes once the merges dropped what only
// unmerged indices hold.
//
// With _source disabled OpenSearch still keeps each document's source for
// peer recovery (_recovery_source) until the shard's retention lease passes
// it (about 30 s) and a merge rewrites the segment; a merge before that
// keeps it. So each pass adds a marker document (its own segment, so the
// merge rewrites every segment even of an index already merged), flushes,
// waits for the leases, flushes again and merges; passes repeat until the
// total holds (or 4 passes).
func (b *bench) mergedSizes(ctx context.Context) ([]indexInfo, error) {
	var last int64
	for pass := 1; ; pass++ {
		idx, err := b.mergeOnce(ctx, pass)
		if err != nil {
			return nil, err
		}
		var total int64
		for _, i := range idx {
			total += i.Bytes
		}
		fmt.Printf("  merge %d: %d bytes in %d indices\n", pass, total, len(idx))
		if pass == 4 || last > 0 && total > last*99/100 {
			return idx, nil
		}
		last = total
	}
}

func (b *bench) mergeOnce(ctx context.Context, pass int) ([]indexInfo, error) {
	pattern := "/" + b.id + "-*"
	idx, err := b.indices(ctx)
	if err != nil {
		return nil, err
	}
	// Valid in every mapping of the run: strict mappings refuse unknown
	// fields, not missing ones.
	marker := []byte(`{"@timestamp":"2000-01-01T00:00:00Z"}`)
	for _, i := range idx {
		path := fmt.Sprintf("/%s/_doc/fleetbytes-marker-%d?refresh=true", i.Index, pass)
		if st, body, err := b.do(ctx, http.MethodPut, path, marker); err != nil || st >= 300 {
			return nil, fmt.Errorf("marker in %s: %d %s %v", i.Index, st, body, err)
		}
	}
	if err := b.post(ctx, pattern+"/_flush"); err != nil {
		return nil, err
	}
	start := time.Now()
	for {
		behind, err := b.leasesBehind(ctx)
		if err != nil {
			return nil, err
		}
		if behind == 0 {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return nil, fmt.Errorf("retention leases still %d operations behind after 3 min", behind)
		}
		if !sleep(ctx, time.Second) {
			return nil, ctx.Err()
		}
	}
	// A commit made now is safe (the global checkpoint covers it), which
	// lets the merge drop the recovery sources.
	if err := b.post(ctx, pattern+"/_flush?force=true"); err != nil {
		return nil, err
	}
	if err := b.post(ctx, pattern+"/_forcemerge?max_num_segments=1"); err != nil {
		return nil, err
	}
	if err := b.post(ctx, pattern+"/_refresh"); err != nil {
		return nil, err
	}
	// Store stats are cached for index.store.stats_refresh_interval (10 s).
	if !sleep(ctx, 11*time.Second) {
		return nil, ctx.Err()
	}
	return b.indices(ctx)
}

func (b *bench) post(ctx context.Context, path string) error {
	st, body, err := b.do(ctx, http.MethodPost, path, nil)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if st != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", path, st, body)
	}
	return nil
}

// leasesBehind is how many operations of the run's primaries are not yet
// below every retention lease.
func (b *bench) leasesBehind(ctx context.Context) (int64, error) {
	path := "/" + b.id + "-*/_stats/docs?level=shards"
	st, body, err := b.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, err
	}
	if st != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", path, st, body)
	}
	return indexertest.LeasesBehind(body)
}

// parts groups Lucene's files by what they hold.
var parts = []struct {
	name string
	ext  []string
}{
	{"postings", []string{"tim", "tip", "tmd", "doc", "pos", "pay", "psm"}},
	{"doc values", []string{"dvd", "dvm"}},
	{"points", []string{"kdd", "kdi", "kdm"}},
	{"stored", []string{"fdt", "fdx", "fdm"}},
}

// fileParts sums the files of an index's shard 0 on this node's disk by
// parts (and "other"); nil when the node's data is not on this machine.
func (b *bench) fileParts(ctx context.Context, uuid string) map[string]int64 {
	var s struct {
		Nodes map[string]struct {
			Settings struct {
				Path struct {
					Data []string `json:"data"`
				} `json:"path"`
			} `json:"settings"`
		} `json:"nodes"`
	}
	if err := b.getJSON(ctx, "/_nodes/_local/settings?filter_path=**.path.data", &s); err != nil {
		return nil
	}
	for _, n := range s.Nodes {
		for _, d := range n.Settings.Path.Data {
			dir := filepath.Join(d, "nodes", "0", "indices", uuid, "0", "index")
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			out := map[string]int64{}
			for _, e := range entries {
				fi, err := e.Info()
				if err != nil || fi.IsDir() {
					continue
				}
				ext := strings.TrimPrefix(filepath.Ext(e.Name()), ".")
				part := "other"
				for _, p := range parts {
					for _, x := range p.ext {
						if x == ext {
							part = p.name
						}
					}
				}
				out[part] += fi.Size()
			}
			return out
		}
	}
	return nil
}

// summary prints bytes per raw sample per index kind and in total, where
// they go by Lucene file, and the rollup documents by resolution and kind.
func (b *bench) summary(ctx context.Context, idx []indexInfo, raw int64) error {
	if raw <= 0 {
		return fmt.Errorf("no raw samples counted")
	}
	fmt.Printf("\n## Bytes on disk per raw sample: %d raw samples, every index force-merged to one segment\n\n", raw)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "index\tdocuments\tbytes\tbytes per raw sample\tpostings\tdoc values\tpoints\tstored\tother\t")
	var total int64
	perKind := map[string]int64{}
	for _, i := range idx {
		total += i.Bytes
		perKind[kindOf(b.id, i.Index)] += i.Bytes
		fp := b.fileParts(ctx, i.UUID)
		cell := func(part string) string {
			if fp == nil {
				return "-"
			}
			return fmt.Sprintf("%.3f", float64(fp[part])/float64(raw))
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.3f\t%s\t%s\t%s\t%s\t%s\t\n", i.Index, i.Docs, i.Bytes, float64(i.Bytes)/float64(raw),
			cell("postings"), cell("doc values"), cell("points"), cell("stored"), cell("other"))
	}
	w.Flush()
	fmt.Println("\n(postings ... other: bytes per raw sample by Lucene file, read from the node's data directory)")
	fmt.Println()
	for _, k := range kinds {
		fmt.Printf("%s: %.3f bytes per raw sample\n", k, float64(perKind[k])/float64(raw))
	}
	fmt.Printf("total: %.3f bytes per raw sample (%d bytes; target <= 2.5)\n", float64(total)/float64(raw), total)
	return b.rollupKinds(ctx)
}

// rollupKinds prints the rollup documents by resolution and kind.
func (b *bench) rollupKinds(ctx context.Context) error {
	req := `{"size":0,"aggs":{"k":{"composite":{"size":100,"sources":[{"r":{"terms":{"field":"resolution"}}},{"k":{"terms":{"field":"kind"}}}]}}}}`
	st, body, err := b.do(ctx, http.MethodPost, "/"+b.id+"-rollups*/_search", []byte(req))
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("rollup kinds: %d %s %v", st, body, err)
	}
	var resp struct {
		Aggregations struct {
			K struct {
				Buckets []struct {
					Key struct {
						R string `json:"r"`
						K string `json:"k"`
					} `json:"key"`
					Count int64 `json:"doc_count"`
				} `json:"buckets"`
			} `json:"k"`
		} `json:"aggregations"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("rollup kinds: %w", err)
	}
	fmt.Print("rollup documents:")
	for _, bk := range resp.Aggregations.K.Buckets {
		fmt.Printf(" %s/%s %d", bk.Key.R, bk.Key.K, bk.Count)
	}
	fmt.Println()
	return nil
}
