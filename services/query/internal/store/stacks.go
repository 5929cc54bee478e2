package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
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
	// skip are the windows whose KindStack rollups were left out
	// (sumByStack): a KindStacks document holds them.
	skip map[string]bool
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
	return s.withFrames(ctx, sv)
}

// StackValues sums the selection per stack, from the rollups for long
// ranges (falling back to minute rollups, then to the samples, when coarser
// data is missing) and from the samples otherwise; past MaxStacks, only
// the heaviest stacks.
func (s *Store) StackValues(ctx context.Context, sel Selection) (*StackValues, error) {
	sv, err := s.everyStackValue(ctx, sel)
	if err != nil {
		return nil, err
	}
	s.keepHeaviest(sv)
	return sv, nil
}

// everyStackValue is StackValues with every stack of the selection.
func (s *Store) everyStackValue(ctx context.Context, sel Selection) (*StackValues, error) {
	if s.FromRollups(sel) {
		minuteOnly := false
		for {
			sv, hourly, err := s.sumByStack(ctx, s.rollupIndices(sel.Range), stackRollupQuery(sel, minuteOnly))
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
// every stack of the selection (tens of bytes each); callers cut it
// (keepHeaviest) or bound it (readEdges).
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
	return &StackValues{Values: values, Total: int64(resp.Aggregations.Total.Value), Source: "samples"}, nil
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

// sumByStack sums the stack rollups that query selects (stackRollupQuery)
// per stack ID, every stack of them (callers cut or bound them as
// sampleStackValues' do). A KindStacks document
// packs every stack of its window as a samples document does, so a scripted
// metric unpacks them (indices.StackRollupSumsScript), and reads the
// KindStack documents written before rollups schema 3 (one stack each) as
// well. When the selection holds both kinds, a window may too (rebuilt by a
// rollup of schema 3 after one of schema 2 wrote it): its KindStack
// documents are left out then (packedWindows), and sv.skip keeps which for
// the sums that follow. hourly is the number of hourly documents read.
func (s *Store) sumByStack(ctx context.Context, idx []string, query Query) (sv *StackValues, hourly int64, err error) {
	sums, n, err := s.stackRollupSums(ctx, idx, query, nil)
	if err != nil {
		return nil, 0, err
	}
	var skip map[string]bool
	if n.stack > 0 && n.stacks > 0 {
		// Only windows holding stack documents can hold both: after an
		// upgrade, the hour or so the new rollup rebuilt.
		old := TimeRange{From: time.UnixMilli(n.stackFrom), To: time.UnixMilli(n.stackTo + 1)}
		if skip, err = s.packedWindows(ctx, idx, query, old); err != nil {
			return nil, 0, err
		}
		if sums, n, err = s.stackRollupSums(ctx, idx, query, skip); err != nil {
			return nil, 0, err
		}
	}
	sv = &StackValues{Values: sums, skip: skip}
	for _, v := range sums {
		sv.Total += v
	}
	return sv, n.hourly, nil
}

// stackRollupCounts counts the documents a stackRollupSums read: hourly
// ones, and of each kind; stackFrom and stackTo are the first and last
// window of the stack documents (Unix milliseconds).
type stackRollupCounts struct {
	hourly, stack, stacks int64
	stackFrom, stackTo    int64
}

// stackRollupSums is one search of the sums per stack of query's stack
// rollups, without the KindStack documents of the windows in skip.
func (s *Store) stackRollupSums(ctx context.Context, idx []string, query Query, skip map[string]bool) (map[string]int64, stackRollupCounts, error) {
	var resp struct {
		Aggregations struct {
			Hourly docCount `json:"hourly"`
			Stack  struct {
				DocCount int64    `json:"doc_count"`
				From     sumValue `json:"from"`
				To       sumValue `json:"to"`
			} `json:"stack"`
			Stacks docCount    `json:"stacks"`
			Sums   scriptedSum `json:"sums"`
		} `json:"aggregations"`
	}
	req := aggsRequest(query, Aggs{
		"hourly": hourlyCount,
		"stack":  {Filter: term("kind", indices.KindStack), Aggs: Aggs{"from": {Min: &Metric{Field: "@timestamp"}}, "to": {Max: &Metric{Field: "@timestamp"}}}},
		"stacks": {Filter: term("kind", indices.KindStacks)},
		"sums":   {ScriptedMetric: indices.StackRollupSumsScript(skip)},
	})
	var n stackRollupCounts
	if err := s.search(ctx, idx, req, &resp, "aggregations.*.doc_count", "aggregations.stack.*.value", "aggregations.sums.value"); err != nil {
		return nil, n, fmt.Errorf("sum rollups by stack: %w", err)
	}
	sums, err := resp.Aggregations.Sums.sums()
	if err != nil {
		return nil, n, fmt.Errorf("sum rollups by stack: %w", err)
	}
	a := resp.Aggregations
	return sums, stackRollupCounts{hourly: a.Hourly.DocCount, stack: a.Stack.DocCount, stacks: a.Stacks.DocCount,
		stackFrom: int64(a.Stack.From.Value), stackTo: int64(a.Stack.To.Value)}, nil
}

// packedWindows are the window keys (indices.WindowKey) of query's
// KindStacks documents starting in r, paged through with a composite
// aggregation.
func (s *Store) packedWindows(ctx context.Context, idx []string, query Query, r TimeRange) (map[string]bool, error) {
	out := map[string]bool{}
	var after map[string]any
	for {
		var resp struct {
			Aggregations struct {
				Windows struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							Service    *string `json:"service"`
							Host       *string `json:"host"`
							Resolution *string `json:"resolution"`
							Timestamp  *int64  `json:"@timestamp"`
						} `json:"key"`
					} `json:"buckets"`
				} `json:"windows"`
			} `json:"aggregations"`
		}
		req := aggsRequest(allOf([]Query{query, term("kind", indices.KindStacks), timeFilter(r)}, nil), Aggs{"windows": {
			Composite: &Composite{Size: s.opts.PageSize, Sources: termSources("service", "host", "resolution", "@timestamp"), After: after},
		}})
		if err := s.search(ctx, idx, req, &resp, "aggregations.windows.after_key", "aggregations.windows.buckets.key"); err != nil {
			return nil, fmt.Errorf("packed stack windows: %w", err)
		}
		w := resp.Aggregations.Windows
		for _, b := range w.Buckets {
			if b.Key.Resolution == nil || b.Key.Timestamp == nil {
				continue
			}
			out[indices.WindowKey(*b.Key.Resolution, time.UnixMilli(*b.Key.Timestamp), deref(b.Key.Service), deref(b.Key.Host))] = true
		}
		if len(w.Buckets) < s.opts.PageSize || w.AfterKey == nil {
			return out, nil
		}
		after = w.AfterKey
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
