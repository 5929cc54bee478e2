package store

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
)

// NoStack names the frame of samples without a stack (memory samples are
// per process) and UnknownStack the frame of a stack ID the stacks index
// does not (yet) hold.
const (
	NoStack      = "[no stack]"
	UnknownStack = "[unknown stack]"
)

// StackValues is a selection summed per stack ID.
type StackValues struct {
	Values    map[string]int64 // stack ID ("" for stack-less samples) -> value
	Total     int64            // of the whole selection, including stacks left out
	Truncated bool             // more stacks than MaxStacks: only the heaviest are in Values
	Source    string           // "samples" or "rollups"
}

// Stacks is a selection's stacks with their frames' names, root first,
// and, for the stacks with frames other than native code, their kinds
// (record.Kind*, "" for native frames).
type Stacks struct {
	StackValues
	Frames map[string][]string
	Kinds  map[string][]string
}

// Stacks sums the selection per stack and reads the frames of its stacks.
func (s *Store) Stacks(ctx context.Context, sel Selection) (*Stacks, error) {
	sv, err := s.StackValues(ctx, sel)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(sv.Values))
	for id := range sv.Values {
		ids = append(ids, id)
	}
	frames, kinds, err := s.frames(ctx, ids)
	if err != nil {
		return nil, err
	}
	return &Stacks{StackValues: *sv, Frames: frames, Kinds: kinds}, nil
}

// StackValues sums the selection per stack, from the rollups for long
// ranges (falling back to minute rollups, then to the samples, when coarser
// data is missing) and from the samples otherwise.
func (s *Store) StackValues(ctx context.Context, sel Selection) (*StackValues, error) {
	if s.FromRollups(sel) {
		minuteOnly := false
		for {
			sv, hourly, err := s.sumByStack(ctx, s.rollupIndices(sel.Range), rollupQuery(sel, "stack", minuteOnly))
			if err != nil {
				return nil, err
			}
			sv.Source = "rollups"
			if hourly == 0 && !minuteOnly && hasWholeHours(sel.Range) {
				minuteOnly = true
				continue
			}
			if sv.Total > 0 || len(sv.Values) > 0 {
				return sv, nil
			}
			break
		}
	}
	return s.sampleStackValues(ctx, sel)
}

// sampleStackValues sums the samples per stack in one search. A samples
// document packs the stacks of one profile and label set with their values
// (schemas/indices/stackvalues.go), so a terms aggregation on stack_id would
// give every stack its document's total: a scripted metric unpacks them
// instead, and a sum of value gives the total. The script's answer holds
// every stack of the selection (tens of bytes each); past MaxStacks only the
// heaviest are kept, the rest shows as "[other]".
func (s *Store) sampleStackValues(ctx context.Context, sel Selection) (*StackValues, error) {
	var resp struct {
		Aggregations struct {
			Total  sumValue    `json:"total"`
			Stacks scriptedSum `json:"stacks"`
		} `json:"aggregations"`
	}
	req := aggsRequest(sampleQuery(sel), Aggs{
		"total":  sumOf("value"),
		"stacks": {ScriptedMetric: indices.StackSumsScript()},
	})
	if err := s.search(ctx, s.sampleIndices(sel.Range), req, &resp, "aggregations.total", "aggregations.stacks.value"); err != nil {
		return nil, fmt.Errorf("sum samples by stack: %w", err)
	}
	values, err := resp.Aggregations.Stacks.sums()
	if err != nil {
		return nil, fmt.Errorf("sum samples by stack: %w", err)
	}
	sv := &StackValues{Values: values, Total: int64(resp.Aggregations.Total.Value), Source: "samples"}
	s.keepHeaviest(sv)
	return sv, nil
}

// keepHeaviest cuts sv down to the MaxStacks heaviest stacks.
func (s *Store) keepHeaviest(sv *StackValues) {
	if len(sv.Values) > s.opts.MaxStacks {
		sv.Values, sv.Truncated = heaviest(sv.Values, s.opts.MaxStacks), true
		s.opts.Truncated.Inc()
	}
}

// scriptedSum is the answer of indices.StackSumsScript: a value per stack.
type scriptedSum struct {
	Value map[string]json.Number `json:"value"`
}

func (a scriptedSum) sums() (map[string]int64, error) {
	out := make(map[string]int64, len(a.Value))
	for id, n := range a.Value {
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

// sumByStack pages through the stack IDs of rollup documents (one per
// stack, unlike samples documents) with a composite aggregation. When the
// selection has more than MaxStacks stacks it stops paging and asks instead
// for the MaxStacks heaviest ones (a terms aggregation ordered by value), so
// the work stays bounded and the flame graph keeps what matters. hourly is
// the number of hourly documents read.
func (s *Store) sumByStack(ctx context.Context, idx []string, query Query) (sv *StackValues, hourly int64, err error) {
	sv = &StackValues{Values: map[string]int64{}}
	var after map[string]any
	for page := 0; ; page++ {
		// Each page scans the selection's documents again, so pages are
		// large (one pass for typical selections) while the buckets held
		// per page stay bounded.
		aggs := Aggs{"stacks": {
			Composite: &Composite{Size: s.opts.PageSize, Sources: []map[string]Agg{{"id": {Terms: &Terms{Field: "stack_id", MissingBucket: true}}}}, After: after},
			Aggs:      Aggs{"v": sumOf("value")},
		}}
		if page == 0 {
			aggs["total"] = sumOf("value")
			aggs["hourly"] = hourlyCount
		}
		var resp struct {
			Aggregations struct {
				Total  sumValue `json:"total"`
				Hourly docCount `json:"hourly"`
				Stacks struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							ID *string `json:"id"`
						} `json:"key"`
						V sumValue `json:"v"`
					} `json:"buckets"`
				} `json:"stacks"`
			} `json:"aggregations"`
		}
		if err := s.search(ctx, idx, aggsRequest(query, aggs), &resp,
			"aggregations.total", "aggregations.hourly", "aggregations.stacks.after_key", "aggregations.stacks.buckets.key", "aggregations.stacks.buckets.v"); err != nil {
			return nil, 0, fmt.Errorf("sum values by stack: %w", err)
		}
		if page == 0 {
			sv.Total = int64(resp.Aggregations.Total.Value)
			hourly = resp.Aggregations.Hourly.DocCount
		}
		for _, b := range resp.Aggregations.Stacks.Buckets {
			id := ""
			if b.Key.ID != nil {
				id = *b.Key.ID
			}
			sv.Values[id] = int64(b.V.Value)
		}
		if len(sv.Values) > s.opts.MaxStacks {
			top, err := s.topStacks(ctx, idx, query)
			if err != nil {
				return nil, 0, err
			}
			sv.Values, sv.Truncated = top, true
			s.opts.Truncated.Inc()
			return sv, hourly, nil
		}
		if len(resp.Aggregations.Stacks.Buckets) < s.opts.PageSize || resp.Aggregations.Stacks.AfterKey == nil {
			return sv, hourly, nil
		}
		after = resp.Aggregations.Stacks.AfterKey
	}
}

func (s *Store) topStacks(ctx context.Context, idx []string, query Query) (map[string]int64, error) {
	var resp struct {
		Aggregations struct {
			Stacks keyedSums `json:"stacks"`
		} `json:"aggregations"`
	}
	req := aggsRequest(query, Aggs{"stacks": heaviestTerms("stack_id", s.opts.MaxStacks, "value")})
	if err := s.search(ctx, idx, req, &resp); err != nil {
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
func (s *Store) frames(ctx context.Context, ids []string) (names, kinds map[string][]string, err error) {
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
			names[id] = []string{NoStack}
			continue
		}
		if f, ok := s.stacks.get(id); ok {
			add(id, f)
			continue
		}
		missing = append(missing, id)
	}
	// All chunks are read before any is used: the names are small.
	err = readChunks(ctx, missing, len(missing), s.nameFrames, func(_ []string, frames map[string]stackFrames) {
		for id, f := range frames {
			add(id, f)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return names, kinds, nil
}

// FrameName is the name a frame is shown by: its function, or for a
// frame stored without one its binary in brackets.
func FrameName(f indices.Frame) string {
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

// readChunks reads ids fetchChunk at a time with read, fetchParallel
// chunks in flight, and hands each chunk's result to use in the order of
// ids. At most batch IDs (rounded up to whole chunks) are read before use
// is called, which bounds what is held. A cold flame graph of thousands of
// stacks is dominated by these reads.
func readChunks[T any](ctx context.Context, ids []string, batch int, read func(context.Context, []string) (T, error), use func([]string, T)) error {
	if len(ids) == 0 {
		return nil
	}
	batch = max(batch, fetchChunk)
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		var chunks [][]string
		for i := 0; i < len(part); i += fetchChunk {
			chunks = append(chunks, part[i:min(i+fetchChunk, len(part))])
		}
		results := make([]T, len(chunks))
		errs := make([]error, len(chunks))
		sem := make(chan struct{}, fetchParallel)
		var wg sync.WaitGroup
		for i, chunk := range chunks {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				results[i], errs[i] = read(ctx, chunk)
			})
		}
		wg.Wait()
		for i, chunk := range chunks {
			if errs[i] != nil {
				return errs[i]
			}
			use(chunk, results[i])
		}
	}
	return nil
}

// storedStacks is the answer of a search of the stacks index by ID.
type storedStacks struct {
	Hits struct {
		Hits []struct {
			ID     string `json:"_id"`
			Source struct {
				Frames []indices.Frame `json:"frames"`
			} `json:"_source"`
		} `json:"hits"`
	} `json:"hits"`
}

// searchStacks reads the stacks of ids with the frame fields of includes.
// It searches with an ids query rather than _mget: the search fetch phase
// reads stored documents in index order, which with compressed stored
// fields was 4-6 times faster for thousands of IDs.
func (s *Store) searchStacks(ctx context.Context, ids, includes []string) (*storedStacks, error) {
	var resp storedStacks
	req := &Request{Size: len(ids), TrackTotalHits: false, Query: idsOf(ids), Source: &Source{Includes: includes}}
	if err := s.search(ctx, []string{s.names.Stacks()}, req, &resp, "hits.hits._id", "hits.hits._source"); err != nil {
		return nil, err
	}
	return &resp, nil
}

// nameFrames reads the frame names and kinds of ids into the cache; IDs
// the stacks index lacks get one UnknownStack frame.
func (s *Store) nameFrames(ctx context.Context, ids []string) (map[string]stackFrames, error) {
	resp, err := s.searchStacks(ctx, ids, []string{"frames.function", "frames.binary", "frames.kind"})
	if err != nil {
		return nil, fmt.Errorf("get stacks: %w", err)
	}
	out := make(map[string]stackFrames, len(ids))
	for _, d := range resp.Hits.Hits {
		n := len(d.Source.Frames)
		sf := stackFrames{names: make([]string, n)}
		for i, f := range d.Source.Frames {
			// Stored leaf first, as in pprof; trees read root first.
			sf.names[n-1-i] = FrameName(f)
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
			sf.names = []string{NoStack}
		}
		s.stacks.put(d.ID, sf)
		out[d.ID] = sf
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			out[id] = stackFrames{names: []string{UnknownStack}}
		}
	}
	return out, nil
}

// fullFrames reads every stored field of the frames of ids, leaf first;
// IDs the stacks index lacks are left out.
func (s *Store) fullFrames(ctx context.Context, ids []string) (map[string][]indices.Frame, error) {
	resp, err := s.searchStacks(ctx, ids, []string{"frames"})
	if err != nil {
		return nil, fmt.Errorf("get stack frames: %w", err)
	}
	out := make(map[string][]indices.Frame, len(resp.Hits.Hits))
	for _, d := range resp.Hits.Hits {
		out[d.ID] = d.Source.Frames
	}
	return out, nil
}

// ReadFrames reads every stored field of the frames of ids (leaf first, as
// stored) and hands them to use a chunk at a time, in the order of ids, so
// only fetchChunk*fetchParallel stacks are held at once; IDs the stacks
// index lacks are missing from a chunk's map. Only the pprof export needs
// files and lines, so these never enter the cache, which holds names for
// the flame graphs.
func (s *Store) ReadFrames(ctx context.Context, ids []string, use func(chunk []string, frames map[string][]indices.Frame)) error {
	return readChunks(ctx, ids, fetchChunk*fetchParallel, s.fullFrames, use)
}
