package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// maxLabelGroups is the most (service, host) pairs whose samples a pprof
// export labels. Each pair's stacks come back in a scripted-metric state of
// their own, so the answer grows with the pairs; past this many the export
// carries no labels, as a fleet-wide export would mostly repeat its stacks.
const maxLabelGroups = 16

// sampleType names the pprof sample type of a profile type.
func sampleType(t record.ProfileType) *profile.ValueType {
	switch t {
	case record.ProfileCPU:
		return &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	case record.ProfileMemory:
		return &profile.ValueType{Type: "rss", Unit: "bytes"}
	case record.ProfileHeap:
		return &profile.ValueType{Type: "inuse_space", Unit: "bytes"}
	default:
		return &profile.ValueType{Type: "alloc_space", Unit: "bytes"}
	}
}

// exportValues are the values a pprof export holds: the selection per
// stack and, when it spans few enough (service, host) pairs, per pair.
type exportValues struct {
	*stackValues
	groups []labelGroup // nil: the samples carry no labels
}

// labelGroup is one (service, host) pair: its pprof labels and its values
// per stack (of the stacks kept in stackValues.values only).
type labelGroup struct {
	labels map[string][]string
	values map[string]int64
}

// exportValues sums the selection per stack as a flame graph does, per
// (service, host) too when the selection reads the samples and spans at
// most maxLabelGroups pairs.
func (a *API) exportValues(ctx context.Context, s selection) (*exportValues, error) {
	if !a.fromRollups(s) {
		ev, err := a.labeledStackValues(ctx, s)
		if err != nil || ev != nil {
			return ev, err
		}
	}
	sv, err := a.stackValues(ctx, s)
	if err != nil {
		return nil, err
	}
	return &exportValues{stackValues: sv}, nil
}

// labelSources are the composite aggregation sources of a (service, host) pair.
var labelSources = []any{
	map[string]any{"service": map[string]any{"terms": map[string]any{"field": "service", "missing_bucket": true}}},
	map[string]any{"host": map[string]any{"terms": map[string]any{"field": "host", "missing_bucket": true}}},
}

type labelKey struct {
	Service *string `json:"service"`
	Host    *string `json:"host"`
}

func (k labelKey) labels() map[string][]string {
	l := map[string][]string{}
	if k.Service != nil {
		l["service"] = []string{*k.Service}
	}
	if k.Host != nil {
		l["host"] = []string{*k.Host}
	}
	return l
}

// labeledStackValues sums the samples per (service, host) and stack, or
// returns nil when the selection spans more than maxLabelGroups pairs. A
// first search counts the pairs from doc values only (no script), so a wide
// selection costs little more than without labels. The sums and the total
// come from one search, so the export's total is exact even while samples
// arrive; a pair that appeared between the two searches sends the export
// back to the unlabelled sums.
func (a *API) labeledStackValues(ctx context.Context, s selection) (*exportValues, error) {
	idx := a.sampleIndices(s.tr)
	var count struct {
		Aggregations struct {
			Groups struct {
				Buckets []struct{} `json:"buckets"`
			} `json:"groups"`
		} `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": a.sampleQuery(s), "aggs": map[string]any{
		"groups": map[string]any{"composite": map[string]any{"size": maxLabelGroups + 1, "sources": labelSources}},
	}}
	if err := a.search(ctx, idx, body, &count, "aggregations.groups.buckets.doc_count"); err != nil {
		return nil, fmt.Errorf("count services and hosts: %w", err)
	}
	if len(count.Aggregations.Groups.Buckets) > maxLabelGroups {
		return nil, nil
	}

	var resp struct {
		Aggregations struct {
			Total  sumAgg `json:"total"`
			Groups struct {
				Buckets []struct {
					Key    labelKey `json:"key"`
					Stacks struct {
						Value map[string]json.Number `json:"value"`
					} `json:"stacks"`
				} `json:"buckets"`
			} `json:"groups"`
		} `json:"aggregations"`
	}
	body = map[string]any{"size": 0, "track_total_hits": false, "query": a.sampleQuery(s), "aggs": map[string]any{
		"total": map[string]any{"sum": map[string]any{"field": "value"}},
		"groups": map[string]any{
			"composite": map[string]any{"size": maxLabelGroups + 1, "sources": labelSources},
			"aggs":      map[string]any{"stacks": map[string]any{"scripted_metric": indices.StackSumsScript()}},
		},
	}}
	if err := a.search(ctx, idx, body, &resp, "aggregations.total", "aggregations.groups.buckets.key", "aggregations.groups.buckets.stacks.value"); err != nil {
		return nil, fmt.Errorf("sum samples by service, host and stack: %w", err)
	}
	buckets := resp.Aggregations.Groups.Buckets
	if len(buckets) > maxLabelGroups {
		return nil, nil
	}
	sv := &stackValues{values: map[string]int64{}, total: int64(resp.Aggregations.Total.Value), source: "samples"}
	ev := &exportValues{stackValues: sv, groups: make([]labelGroup, 0, len(buckets))}
	for _, b := range buckets {
		values, err := stackSums(b.Stacks.Value)
		if err != nil {
			return nil, fmt.Errorf("sum samples by service, host and stack: %w", err)
		}
		for id, v := range values {
			sv.values[id] += v
		}
		ev.groups = append(ev.groups, labelGroup{labels: b.Key.labels(), values: values})
	}
	// The heaviest stacks of the whole selection, as a flame graph keeps
	// them; each pair keeps its values of those.
	if len(sv.values) > a.opts.MaxStacks {
		sv.values, sv.truncated = heaviest(sv.values, a.opts.MaxStacks), true
		a.metrics.truncated.Inc()
		for _, g := range ev.groups {
			for id := range g.values {
				if _, ok := sv.values[id]; !ok {
					delete(g.values, id)
				}
			}
		}
	}
	return ev, nil
}

// fetchFullStacks reads every stored field of the frames of ids, leaf
// first; IDs the stacks index lacks are left out. Only the pprof export
// needs files and lines, so these never enter the stack cache, which holds
// names for the flame graphs.
func (a *API) fetchFullStacks(ctx context.Context, ids []string) (map[string][]indices.Frame, error) {
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
		"_source": map[string]any{"includes": []string{"frames"}},
	}
	if err := a.search(ctx, []string{a.names.Stacks()}, body, &resp, "hits.hits._id", "hits.hits._source"); err != nil {
		return nil, fmt.Errorf("get stack frames: %w", err)
	}
	out := make(map[string][]indices.Frame, len(resp.Hits.Hits))
	for _, d := range resp.Hits.Hits {
		out[d.ID] = d.Source.Frames
	}
	return out, nil
}

// exportProfile builds the pprof profile of a selection. The stacks' frames
// are read fetchChunk at a time (fetchParallel in flight) and turned into
// samples as they come, so besides the profile itself only those chunks are
// held.
func (a *API) exportProfile(ctx context.Context, s selection) (*profile.Profile, *exportValues, error) {
	ev, err := a.exportValues(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(ev.values))
	for id := range ev.values {
		ids = append(ids, id)
	}
	// Sorted, so the same data gives the same file.
	slices.Sort(ids)
	b := newPprofBuilder(s)
	// Stack-less samples have no document to read; "" sorts first.
	if len(ids) > 0 && ids[0] == "" {
		b.addStacks(ev, ids[:1], nil)
		ids = ids[1:]
	}
	batch := fetchChunk * fetchParallel
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		var chunks [][]string
		for i := 0; i < len(part); i += fetchChunk {
			chunks = append(chunks, part[i:min(i+fetchChunk, len(part))])
		}
		results := make([]map[string][]indices.Frame, len(chunks))
		errs := make([]error, len(chunks))
		var wg sync.WaitGroup
		for i, chunk := range chunks {
			wg.Go(func() { results[i], errs[i] = a.fetchFullStacks(ctx, chunk) })
		}
		wg.Wait()
		for i, chunk := range chunks {
			if errs[i] != nil {
				return nil, nil, errs[i]
			}
			b.addStacks(ev, chunk, results[i])
		}
	}
	return b.finish(ev), ev, nil
}

// toProfile builds the profile of ev from the frames of all its stacks at
// once; exportProfile does the same a chunk at a time.
func toProfile(ev *exportValues, s selection, frames map[string][]indices.Frame) *profile.Profile {
	ids := make([]string, 0, len(ev.values))
	for id := range ev.values {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := newPprofBuilder(s)
	b.addStacks(ev, ids, frames)
	return b.finish(ev)
}

// pprofBuilder turns stored stacks into a pprof profile: a mapping per
// binary (the agent's pseudo-files [kernel.kallsyms], [python], [java],
// [js] and [jit] included), a function per (name, file) and a location per
// distinct frame (binary, function, file, line) with that line. The stacks
// index stores inlined calls as frames of their own and no addresses, so
// every frame is a location of its own with address 0; it stores no start
// lines nor build IDs either, so those stay empty.
type pprofBuilder struct {
	p         *profile.Profile
	mappings  map[string]*profile.Mapping
	functions map[functionKey]*profile.Function
	locations map[locationKey]*profile.Location
	kept      int64
}

type functionKey struct{ name, file string }

type locationKey struct {
	binary, function, file string
	line                   int64
}

func newPprofBuilder(s selection) *pprofBuilder {
	st := sampleType(s.typ)
	return &pprofBuilder{
		p: &profile.Profile{
			SampleType:    []*profile.ValueType{st},
			PeriodType:    st,
			Period:        1,
			TimeNanos:     s.tr.From.UnixNano(),
			DurationNanos: int64(s.tr.Duration()),
		},
		mappings:  map[string]*profile.Mapping{},
		functions: map[functionKey]*profile.Function{},
		locations: map[locationKey]*profile.Location{},
	}
}

func (b *pprofBuilder) mapping(binary string) *profile.Mapping {
	if binary == "" {
		return nil
	}
	if m := b.mappings[binary]; m != nil {
		return m
	}
	// Names come from the symbolizer or the agent and are final: with
	// HasFunctions set, pprof does not look for the binary to symbolize.
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), File: binary, HasFunctions: true}
	b.p.Mapping = append(b.p.Mapping, m)
	b.mappings[binary] = m
	return m
}

func (b *pprofBuilder) location(f indices.Frame) *profile.Location {
	name := frameName(f)
	key := locationKey{binary: f.Binary, function: name, file: f.File, line: f.Line}
	if l := b.locations[key]; l != nil {
		return l
	}
	fk := functionKey{name: name, file: f.File}
	fn := b.functions[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: f.File}
		b.p.Function = append(b.p.Function, fn)
		b.functions[fk] = fn
	}
	m := b.mapping(f.Binary)
	if m != nil {
		m.HasFilenames = m.HasFilenames || f.File != ""
		m.HasLineNumbers = m.HasLineNumbers || f.Line != 0
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: m, Line: []profile.Line{{Function: fn, Line: f.Line}}}
	b.p.Location = append(b.p.Location, l)
	b.locations[key] = l
	return l
}

// add appends a sample of frames, leaf first as stored and as pprof wants.
func (b *pprofBuilder) add(frames []indices.Frame, v int64, labels map[string][]string) {
	smp := &profile.Sample{Value: []int64{v}, Label: labels, Location: make([]*profile.Location, len(frames))}
	for i, f := range frames {
		smp.Location[i] = b.location(f)
	}
	b.p.Sample = append(b.p.Sample, smp)
	b.kept += v
}

// addStacks adds the samples of ids, one per stack (and label set), with
// the frames read for them: "" (samples without a stack) as "[no stack]",
// IDs without frames as "[unknown stack]", as in a flame graph.
func (b *pprofBuilder) addStacks(ev *exportValues, ids []string, frames map[string][]indices.Frame) {
	for _, id := range ids {
		fs, ok := frames[id]
		switch {
		case id == "" || ok && len(fs) == 0:
			fs = []indices.Frame{{Function: noStack}}
		case !ok:
			fs = []indices.Frame{{Function: unknownStack}}
		}
		if ev.groups == nil {
			if v := ev.values[id]; v != 0 {
				b.add(fs, v, nil)
			}
			continue
		}
		for _, g := range ev.groups {
			if v := g.values[id]; v != 0 {
				b.add(fs, v, g.labels)
			}
		}
	}
}

// finish adds the value of the stacks left out by MaxStacks as one
// "[other]" sample, so the profile's total is the selection's.
func (b *pprofBuilder) finish(ev *exportValues) *profile.Profile {
	if rest := ev.total - b.kept; rest > 0 && ev.truncated {
		b.add([]indices.Frame{{Function: otherNodes}}, rest, nil)
	}
	return b.p
}

func (a *API) handlePprof(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error) {
	s, err := a.parseSelection(r.URL.Query(), "query", "from", "to")
	if err != nil {
		return nil, err
	}
	p, ev, err := a.exportProfile(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="stackstream-%s-%s.pb.gz"`, s.typ, s.tr.From.UTC().Format(time.RFC3339)))
	if ev.truncated {
		w.Header().Set("X-Stackstream-Truncated", "true")
	}
	// Write gzips; an error here is a client gone away: nothing to answer.
	if err := p.Write(w); err != nil {
		a.logger.Debug("write pprof answer", "err", err)
	}
	return nil, nil
}
