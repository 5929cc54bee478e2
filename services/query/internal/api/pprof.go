package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// sampleType names the pprof sample type of a profile type.
func sampleType(t record.ProfileType) *profile.ValueType {
	switch t {
	case record.ProfileCPU:
		return &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	case record.ProfileOffCPU:
		return &profile.ValueType{Type: "offcpu", Unit: "nanoseconds"}
	case record.ProfileMemory:
		return &profile.ValueType{Type: "rss", Unit: "bytes"}
	case record.ProfileHeap:
		return &profile.ValueType{Type: "inuse_space", Unit: "bytes"}
	default:
		return &profile.ValueType{Type: "alloc_space", Unit: "bytes"}
	}
}

// exportProfile builds the pprof profile of a selection. The stacks' frames
// are read a few thousand at a time (store.ReadFrames) and turned into
// samples as they come, so besides the profile itself only those are held.
func (a *API) exportProfile(ctx context.Context, s store.Selection) (*profile.Profile, *store.ExportValues, error) {
	ev, err := a.store.ExportValues(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(ev.Values))
	for id := range ev.Values {
		ids = append(ids, id)
	}
	// Sorted, so the same data gives the same file.
	slices.Sort(ids)
	b := newPprofBuilder(s, ev)
	// Stack-less samples have no document to read; "" sorts first.
	if len(ids) > 0 && ids[0] == "" {
		b.addStacks(ids[:1], nil)
		ids = ids[1:]
	}
	if err := a.store.ReadFrames(ctx, ids, b.addStacks); err != nil {
		return nil, nil, err
	}
	return b.finish(), ev, nil
}

// toProfile builds the profile of ev from the frames of all its stacks at
// once; exportProfile does the same a chunk at a time.
func toProfile(ev *store.ExportValues, s store.Selection, frames map[string][]indices.Frame) *profile.Profile {
	ids := make([]string, 0, len(ev.Values))
	for id := range ev.Values {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := newPprofBuilder(s, ev)
	b.addStacks(ids, frames)
	return b.finish()
}

// pprofBuilder turns stored stacks into a pprof profile: a mapping per
// binary (the agent's pseudo-files [kernel.kallsyms], [python], [java],
// [js] and [jit] included), a function per (name, file) and a location per
// distinct frame (binary, function, file, line) with that line. The stacks
// index stores inlined calls as frames of their own and no addresses, so
// every frame is a location of its own with address 0; it stores no start
// lines nor build IDs either, so those stay empty.
type pprofBuilder struct {
	ev        *store.ExportValues
	labels    []map[string][]string // of each of ev.Groups
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

func newPprofBuilder(s store.Selection, ev *store.ExportValues) *pprofBuilder {
	st := sampleType(s.Type)
	labels := make([]map[string][]string, len(ev.Groups))
	for i, g := range ev.Groups {
		labels[i] = make(map[string][]string, len(g.Labels))
		for k, v := range g.Labels {
			labels[i][k] = []string{v}
		}
	}
	return &pprofBuilder{
		ev: ev, labels: labels,
		p: &profile.Profile{
			SampleType:    []*profile.ValueType{st},
			PeriodType:    st,
			Period:        1,
			TimeNanos:     s.Range.From.UnixNano(),
			DurationNanos: int64(s.Range.Duration()),
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
	name := store.FrameName(f)
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
func (b *pprofBuilder) addStacks(ids []string, frames map[string][]indices.Frame) {
	for _, id := range ids {
		fs, ok := frames[id]
		switch {
		case id == "" || ok && len(fs) == 0:
			fs = []indices.Frame{{Function: noStack}}
		case !ok:
			fs = []indices.Frame{{Function: unknownStack}}
		}
		if b.ev.Groups == nil {
			if v := b.ev.Values[id]; v != 0 {
				b.add(fs, v, nil)
			}
			continue
		}
		for i, g := range b.ev.Groups {
			if v := g.Values[id]; v != 0 {
				b.add(fs, v, b.labels[i])
			}
		}
	}
}

// finish adds the value of the stacks left out by MaxStacks as one
// "[other]" sample, so the profile's total is the selection's.
func (b *pprofBuilder) finish() *profile.Profile {
	if rest := b.ev.Total - b.kept; rest > 0 && b.ev.Truncated {
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
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="stackstream-%s-%s.pb.gz"`, s.Type, s.Range.From.UTC().Format(time.RFC3339)))
	if ev.Truncated {
		w.Header().Set("X-Stackstream-Truncated", "true")
	}
	// Write gzips; an error here is a client gone away: nothing to answer.
	if err := p.Write(w); err != nil {
		a.logger.Debug("write pprof answer", "err", err)
	}
	return nil, nil
}
