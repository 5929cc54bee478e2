package store

import (
	"context"
	"fmt"

	"github.com/stackstream/stackstream/schemas/indices"
)

// MaxLabelGroups is the most (service, host) pairs ExportValues sums
// apart. Each pair's stacks come back in a scripted-metric state of their
// own, so the answer grows with the pairs; past this many the export
// carries no labels, as a fleet-wide export would mostly repeat its stacks.
const MaxLabelGroups = 16

// ExportValues are the values a pprof export holds: the selection per
// stack and, when it spans few enough (service, host) pairs, per pair.
type ExportValues struct {
	StackValues
	Groups []LabelGroup // nil: the values are not split by labels
}

// LabelGroup is one (service, host) pair: its labels (a missing one left
// out) and its values per stack (of the stacks kept in Values only).
type LabelGroup struct {
	Labels map[string]string
	Values map[string]int64
}

// ExportValues sums the selection per stack as StackValues does, per
// (service, host) too when the selection reads the samples and spans at
// most MaxLabelGroups pairs.
func (s *Store) ExportValues(ctx context.Context, sel Selection) (*ExportValues, error) {
	if !s.FromRollups(sel) {
		ev, err := s.labeledStackValues(ctx, sel)
		if err != nil || ev != nil {
			return ev, err
		}
	}
	sv, err := s.StackValues(ctx, sel)
	if err != nil {
		return nil, err
	}
	return &ExportValues{StackValues: *sv}, nil
}

type labelKey struct {
	Service *string `json:"service"`
	Host    *string `json:"host"`
}

func (k labelKey) labels() map[string]string {
	l := map[string]string{}
	if k.Service != nil {
		l["service"] = *k.Service
	}
	if k.Host != nil {
		l["host"] = *k.Host
	}
	return l
}

// labeledStackValues sums the samples per (service, host) and stack, or
// returns nil when the selection spans more than MaxLabelGroups pairs. A
// first search counts the pairs from doc values only (no script), so a wide
// selection costs little more than without labels. The sums and the total
// come from one search, so the export's total is exact even while samples
// arrive; a pair that appeared between the two searches sends the export
// back to the unlabelled sums.
func (s *Store) labeledStackValues(ctx context.Context, sel Selection) (*ExportValues, error) {
	idx := s.sampleIndices(sel.Range)
	groups := func(aggs Aggs) Agg {
		return Agg{Composite: &Composite{Size: MaxLabelGroups + 1, Sources: termSources("service", "host")}, Aggs: aggs}
	}
	var count struct {
		Aggregations struct {
			Groups struct {
				Buckets []struct{} `json:"buckets"`
			} `json:"groups"`
		} `json:"aggregations"`
	}
	if err := s.search(ctx, idx, aggsRequest(sampleQuery(sel), Aggs{"groups": groups(nil)}), &count, "aggregations.groups.buckets.doc_count"); err != nil {
		return nil, fmt.Errorf("count services and hosts: %w", err)
	}
	if len(count.Aggregations.Groups.Buckets) > MaxLabelGroups {
		return nil, nil
	}

	var resp struct {
		Aggregations struct {
			Total  sumValue `json:"total"`
			Groups struct {
				Buckets []struct {
					Key    labelKey    `json:"key"`
					Stacks scriptedSum `json:"stacks"`
				} `json:"buckets"`
			} `json:"groups"`
		} `json:"aggregations"`
	}
	req := aggsRequest(sampleQuery(sel), Aggs{
		"total":  sumOf("value"),
		"groups": groups(Aggs{"stacks": {ScriptedMetric: indices.StackSumsScript()}}),
	})
	if err := s.search(ctx, idx, req, &resp, "aggregations.total", "aggregations.groups.buckets.key", "aggregations.groups.buckets.stacks.value"); err != nil {
		return nil, fmt.Errorf("sum samples by service, host and stack: %w", err)
	}
	buckets := resp.Aggregations.Groups.Buckets
	if len(buckets) > MaxLabelGroups {
		return nil, nil
	}
	ev := &ExportValues{
		StackValues: StackValues{Values: map[string]int64{}, Total: int64(resp.Aggregations.Total.Value), Source: "samples"},
		Groups:      make([]LabelGroup, 0, len(buckets)),
	}
	for _, b := range buckets {
		values, err := b.Stacks.sums()
		if err != nil {
			return nil, fmt.Errorf("sum samples by service, host and stack: %w", err)
		}
		for id, v := range values {
			ev.Values[id] += v
		}
		ev.Groups = append(ev.Groups, LabelGroup{Labels: b.Key.labels(), Values: values})
	}
	// The heaviest stacks of the whole selection, as a flame graph keeps
	// them; each pair keeps its values of those.
	s.keepHeaviest(&ev.StackValues)
	if ev.Truncated {
		for _, g := range ev.Groups {
			for id := range g.Values {
				if _, ok := ev.Values[id]; !ok {
					delete(g.Values, id)
				}
			}
		}
	}
	return ev, nil
}
