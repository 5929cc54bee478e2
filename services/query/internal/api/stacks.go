package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// noStack names the frame of samples without a stack (memory samples are
// per process) and unknownStack the frame of a stack ID the stacks index
// does not (yet) hold.
const (
	noStack      = "[no stack]"
	unknownStack = "[unknown stack]"
	otherNodes   = "[other]"
)

// selection is what a flame graph, top list, diff or pprof export reads: a
// profile type, a selector and a time range.
type selection struct {
	typ record.ProfileType
	sel selector.Selector
	tr  timeRange
}

// stackValues is the selection summed per stack ID.
type stackValues struct {
	values    map[string]int64 // stack ID ("" for stack-less samples) -> value
	total     int64            // of the whole selection, including stacks left out
	truncated bool             // more stacks than MaxStacks: only the heaviest are in values
	source    string           // "samples" or "rollups"
}

// fromRollups reports whether a selection reads the per-stack rollups
// instead of the raw samples: for ranges longer than RawMaxRange, when the
// selector only names fields the rollups have.
func (a *API) fromRollups(s selection) bool {
	return s.tr.Duration() > a.opts.RawMaxRange && s.sel.OnlyFields("service", "host")
}

// stackValues sums the selection per stack, from the rollups for long
// ranges (falling back to minute rollups, then to the samples, when coarser
// data is missing) and from the samples otherwise.
func (a *API) stackValues(ctx context.Context, s selection) (*stackValues, error) {
	if a.fromRollups(s) {
		minuteOnly := false
		for {
			sv, hourly, err := a.rollupStackValues(ctx, s, minuteOnly)
			if err != nil {
				return nil, err
			}
			if hourly == 0 && !minuteOnly && hasWholeHours(s.tr) {
				minuteOnly = true
				continue
			}
			if sv.total > 0 || len(sv.values) > 0 {
				return sv, nil
			}
			break
		}
	}
	return a.sampleStackValues(ctx, s)
}

func (a *API) sampleQuery(s selection) map[string]any {
	filter, mustNot := s.sel.Clauses()
	filter = append([]any{timeFilter(s.tr), termQ("type", string(s.typ))}, filter...)
	return boolQ(filter, mustNot)
}

func (a *API) rollupQuery(s selection, kind string, minuteOnly bool) map[string]any {
	filter, mustNot := s.sel.Clauses()
	filter = append([]any{termQ("kind", kind), termQ("type", string(s.typ)), rollupTime(s.tr, minuteOnly)}, filter...)
	return boolQ(filter, mustNot)
}

// sampleStackValues sums the samples per stack in one search. A samples
// document packs the stacks of one profile and label set with their values
// (schemas/indices/stackvalues.go), so a terms aggregation on stack_id would
// give every stack its document's total: a scripted metric unpacks them
// instead, and a sum of value gives the total. The script's answer holds
// every stack of the selection (tens of bytes each); past MaxStacks only the
// heaviest are kept, the rest shows as "[other]".
func (a *API) sampleStackValues(ctx context.Context, s selection) (*stackValues, error) {
	var resp struct {
		Aggregations struct {
			Total  sumAgg `json:"total"`
			Stacks struct {
				Value map[string]json.Number `json:"value"`
			} `json:"stacks"`
		} `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": a.sampleQuery(s), "aggs": map[string]any{
		"total":  map[string]any{"sum": map[string]any{"field": "value"}},
		"stacks": map[string]any{"scripted_metric": indices.StackSumsScript()},
	}}
	if err := a.search(ctx, a.sampleIndices(s.tr), body, &resp, "aggregations.total", "aggregations.stacks.value"); err != nil {
		return nil, fmt.Errorf("sum samples by stack: %w", err)
	}
	values, err := stackSums(resp.Aggregations.Stacks.Value)
	if err != nil {
		return nil, fmt.Errorf("sum samples by stack: %w", err)
	}
	sv := &stackValues{values: values, total: int64(resp.Aggregations.Total.Value), source: "samples"}
	if len(sv.values) > a.opts.MaxStacks {
		sv.values, sv.truncated = heaviest(sv.values, a.opts.MaxStacks), true
		a.metrics.truncated.Inc()
	}
	return sv, nil
}

// stackSums decodes the answer of indices.StackSumsScript.
func stackSums(sums map[string]json.Number) (map[string]int64, error) {
	out := make(map[string]int64, len(sums))
	for id, n := range sums {
		v, err := n.Int64()
		if err != nil {
			// Sums are longs; a float would only come from a change in
			// OpenSearch's serialization, and is still the right number.
			f, ferr := n.Float64()
			if ferr != nil {
				return nil, fmt.Errorf("value %q of stack %q: %w", n, id, err)
			}
			v = int64(f)
		}
		out[id] = v
	}
	return out, nil
}

// heaviest returns the n entries of values with the largest values (ties
// broken by ID, so answers are stable). "" (samples without a stack) ranks
// like any stack: kept when heavy enough, else part of "[other]".
func heaviest(values map[string]int64, n int) map[string]int64 {
	ids := make([]string, 0, len(values))
	for id := range values {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y string) int {
		if c := cmp.Compare(values[y], values[x]); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	out := make(map[string]int64, n)
	for _, id := range ids[:min(n, len(ids))] {
		out[id] = values[id]
	}
	return out
}

func (a *API) rollupStackValues(ctx context.Context, s selection, minuteOnly bool) (*stackValues, int64, error) {
	sv, hourly, err := a.sumByStack(ctx, a.rollupIndices(s.tr), a.rollupQuery(s, "stack", minuteOnly))
	if err != nil {
		return nil, 0, err
	}
	sv.source = "rollups"
	return sv, hourly, nil
}

// sumByStack pages through the stack IDs of rollup documents (one per
// stack, unlike samples documents) with a composite aggregation. When the
// selection has more than MaxStacks stacks it stops paging and asks instead
// for the MaxStacks heaviest ones (a terms aggregation ordered by value), so
// the work stays bounded and the flame graph keeps what matters.
func (a *API) sumByStack(ctx context.Context, idx []string, query map[string]any) (*stackValues, int64, error) {
	sv := &stackValues{values: map[string]int64{}}
	var hourly int64
	var after map[string]any
	for page := 0; ; page++ {
		composite := map[string]any{
			// Each page scans the selection's documents again, so pages are
			// large (one pass for typical selections) while the buckets
			// held per page stay bounded.
			"size":    a.opts.PageSize,
			"sources": []any{map[string]any{"id": map[string]any{"terms": map[string]any{"field": "stack_id", "missing_bucket": true}}}},
		}
		if after != nil {
			composite["after"] = after
		}
		aggs := map[string]any{"stacks": map[string]any{"composite": composite, "aggs": map[string]any{"v": map[string]any{"sum": map[string]any{"field": "value"}}}}}
		if page == 0 {
			aggs["total"] = map[string]any{"sum": map[string]any{"field": "value"}}
			aggs["hourly"] = hourlyCountAgg
		}
		var resp struct {
			Aggregations struct {
				Total  sumAgg   `json:"total"`
				Hourly countAgg `json:"hourly"`
				Stacks struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							ID *string `json:"id"`
						} `json:"key"`
						V sumAgg `json:"v"`
					} `json:"buckets"`
				} `json:"stacks"`
			} `json:"aggregations"`
		}
		if err := a.search(ctx, idx, map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": aggs}, &resp,
			"aggregations.total", "aggregations.hourly", "aggregations.stacks.after_key", "aggregations.stacks.buckets.key", "aggregations.stacks.buckets.v"); err != nil {
			return nil, 0, fmt.Errorf("sum values by stack: %w", err)
		}
		if page == 0 {
			sv.total = int64(resp.Aggregations.Total.Value)
			hourly = resp.Aggregations.Hourly.DocCount
		}
		for _, b := range resp.Aggregations.Stacks.Buckets {
			id := ""
			if b.Key.ID != nil {
				id = *b.Key.ID
			}
			sv.values[id] = int64(b.V.Value)
		}
		if len(sv.values) > a.opts.MaxStacks {
			top, err := a.topStacks(ctx, idx, query)
			if err != nil {
				return nil, 0, err
			}
			sv.values, sv.truncated = top, true
			a.metrics.truncated.Inc()
			return sv, hourly, nil
		}
		if len(resp.Aggregations.Stacks.Buckets) < a.opts.PageSize || resp.Aggregations.Stacks.AfterKey == nil {
			return sv, hourly, nil
		}
		after = resp.Aggregations.Stacks.AfterKey
	}
}

func (a *API) topStacks(ctx context.Context, idx []string, query map[string]any) (map[string]int64, error) {
	var resp struct {
		Aggregations struct {
			Stacks struct {
				Buckets []struct {
					Key string `json:"key"`
					V   sumAgg `json:"v"`
				} `json:"buckets"`
			} `json:"stacks"`
		} `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": map[string]any{
		"stacks": map[string]any{
			"terms": map[string]any{"field": "stack_id", "size": a.opts.MaxStacks, "order": map[string]any{"v": "desc"}},
			"aggs":  map[string]any{"v": map[string]any{"sum": map[string]any{"field": "value"}}},
		},
	}}
	if err := a.search(ctx, idx, body, &resp); err != nil {
		return nil, fmt.Errorf("top stacks: %w", err)
	}
	out := make(map[string]int64, len(resp.Aggregations.Stacks.Buckets))
	for _, b := range resp.Aggregations.Stacks.Buckets {
		out[b.Key] = int64(b.V.Value)
	}
	return out, nil
}

// stackFrames are a stack's function names, root first, and their kinds
// (record.Kind*, "" for native code); kinds is nil when every frame is
// native, as in most stacks.
type stackFrames struct {
	names, kinds []string
}

// stackCache keeps the frames of stacks already read. A stack ID is a hash
// of its frames, so an entry never goes stale; the cache is dropped whole
// when full, which is cheap and keeps memory bounded.
type stackCache struct {
	mu  sync.Mutex
	m   map[string]stackFrames
	max int
}

func (c *stackCache) get(id string) (stackFrames, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.m[id]
	return f, ok
}

func (c *stackCache) put(id string, frames stackFrames) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		c.m = make(map[string]stackFrames, c.max)
	}
	c.m[id] = frames
}

// frames returns the function names of each stack, root first, and the
// frames' kinds of the stacks that have frames other than native ones.
// Unknown stack IDs get one frame naming that, so their value still shows.
func (a *API) frames(ctx context.Context, ids []string) (names, kinds map[string][]string, err error) {
	names = make(map[string][]string, len(ids))
	kinds = map[string][]string{}
	add := func(id string, f stackFrames) {
		names[id] = f.names
		if f.kinds != nil {
			kinds[id] = f.kinds
		}
	}
	var missing []string
	for _, id := range ids {
		if id == "" {
			names[id] = []string{noStack}
			continue
		}
		if f, ok := a.cache.get(id); ok {
			add(id, f)
			continue
		}
		missing = append(missing, id)
	}
	var chunks [][]string
	for len(missing) > 0 {
		n := min(len(missing), fetchChunk)
		chunks = append(chunks, missing[:n])
		missing = missing[n:]
	}
	// A few chunks in flight: a cold flame graph of thousands of stacks
	// is dominated by these reads.
	results := make([]map[string]stackFrames, len(chunks))
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, fetchParallel)
	var wg sync.WaitGroup
	for i, chunk := range chunks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = a.fetchStacks(ctx, chunk)
		}()
	}
	wg.Wait()
	for i := range chunks {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
		for id, f := range results[i] {
			add(id, f)
		}
	}
	return names, kinds, nil
}

// frameName is the name a frame is shown by: its function, or for a
// frame stored without one its binary in brackets.
func frameName(f indices.Frame) string {
	if f.Function != "" {
		return f.Function
	}
	if f.Binary != "" {
		return "[" + f.Binary + "]"
	}
	return "[unknown]"
}

const (
	// fetchChunk stays under OpenSearch's index.max_result_window (10000).
	fetchChunk    = 5000
	fetchParallel = 2
)

// fetchStacks reads the frames of ids; IDs the stacks index lacks get one
// unknownStack frame. It searches with an ids query rather than _mget: the
// search fetch phase reads stored documents in index order, which with
// compressed stored fields was 4-6 times faster for thousands of IDs.
func (a *API) fetchStacks(ctx context.Context, ids []string) (map[string]stackFrames, error) {
	var resp struct {
		Hits struct {
			Hits []struct {
				ID     string `json:"_id"`
				Source struct {
					Frames []indices.Frame `json:"frames"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	body := map[string]any{
		"size": len(ids), "track_total_hits": false,
		"query":   map[string]any{"ids": map[string]any{"values": ids}},
		"_source": map[string]any{"includes": []string{"frames.function", "frames.binary", "frames.kind"}},
	}
	if err := a.search(ctx, []string{a.names.Stacks()}, body, &resp, "hits.hits._id", "hits.hits._source"); err != nil {
		return nil, fmt.Errorf("get stacks: %w", err)
	}
	out := make(map[string]stackFrames, len(ids))
	for _, d := range resp.Hits.Hits {
		n := len(d.Source.Frames)
		sf := stackFrames{names: make([]string, n)}
		for i, f := range d.Source.Frames {
			// Stored leaf first, as in pprof; trees read root first.
			sf.names[n-1-i] = frameName(f)
			// Stacks stored before schema 2 have no kind: FrameKind reads
			// it from the binary, the pseudo-file's name.
			if k := f.FrameKind(); k != record.KindNative {
				if sf.kinds == nil {
					sf.kinds = make([]string, n)
				}
				sf.kinds[n-1-i] = k
			}
		}
		if n == 0 {
			sf.names = []string{noStack}
		}
		a.cache.put(d.ID, sf)
		out[d.ID] = sf
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			out[id] = stackFrames{names: []string{unknownStack}}
		}
	}
	return out, nil
}
