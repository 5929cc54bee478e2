package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

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
