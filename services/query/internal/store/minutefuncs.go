package store

import (
	"context"
	"slices"
	"strings"
)

// The rollup writes function documents per hour only (schemas/opensearch.md,
// "Rollup keys and timing"): a function's minutes, the edges of a range and
// the hour in progress, are read from the minute stack documents and the
// stacks' frames, counting a stack once for each distinct function in it,
// as the hourly function documents do.

// minuteStackIDs are the stacks of sel's minute stack rollups in r whose
// frames hold a function that match accepts, with those functions, and
// whether r had more than MaxStacks stacks (only the heaviest are read).
func (s *Store) minuteStackIDs(ctx context.Context, sel Selection, r TimeRange, match func(string) bool) (map[string][]string, *StackValues, error) {
	es := sel
	es.Range = r
	sv, _, err := s.sumByStack(ctx, s.rollupIndices(r), stackRollupQuery(es, true))
	if err != nil {
		return nil, nil, err
	}
	s.keepHeaviest(sv)
	st, err := s.withFrames(ctx, sv)
	if err != nil {
		return nil, nil, err
	}
	out := map[string][]string{}
	for id := range sv.Values {
		if id == "" {
			continue
		}
		var fns []string
		for _, f := range st.Frames[id] {
			// Bracketed names are no function: a frame without one
			// ("[binary]"), a stack missing from the stacks index.
			if strings.HasPrefix(f, "[") || !match(f) {
				continue
			}
			if !slices.Contains(fns, f) {
				fns = append(fns, f)
			}
		}
		if len(fns) > 0 {
			out[id] = fns
		}
	}
	return out, sv, nil
}

// minuteFunctionSums sums sel's minute stack rollups in r per function
// that match accepts.
func (s *Store) minuteFunctionSums(ctx context.Context, sel Selection, r TimeRange, match func(string) bool) (map[string]int64, error) {
	ids, sv, err := s.minuteStackIDs(ctx, sel, r, match)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for id, fns := range ids {
		for _, f := range fns {
			out[f] += sv.Values[id]
		}
	}
	return out, nil
}

// minuteSpans are the parts of tr outside hours: its edges.
func minuteSpans(tr, hours TimeRange) []TimeRange {
	var out []TimeRange
	if tr.From.Before(hours.From) {
		out = append(out, TimeRange{From: tr.From, To: hours.From, Now: tr.Now})
	}
	if hours.To.Before(tr.To) {
		out = append(out, TimeRange{From: hours.To, To: tr.To, Now: tr.Now})
	}
	return out
}
