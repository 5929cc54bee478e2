package pprofwire

import (
	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Frames names the locations of a Tables by pprofx.LocationFrames' rule,
// through a scratch profile.Location that mirrors each: the indexer and the
// rollup must name a location alike, or one stack would have two IDs. It
// reuses its memory and is not safe for concurrent use.
type Frames struct {
	loc   profile.Location
	mp    profile.Mapping
	fns   []profile.Function
	lines []profile.Line
}

// Append appends the frames of l, a location of t as Read read it.
func (f *Frames) Append(dst []indices.Frame, t *Tables, l *Location) []indices.Frame {
	f.loc = profile.Location{Address: l.Address}
	if l.Mapping != 0 {
		f.mp = profile.Mapping{File: t.String(t.Mappings[t.MappingIndex(l.Mapping)].File)}
		f.loc.Mapping = &f.mp
	}
	lines := t.LocationLines(l)
	n := len(lines)
	if cap(f.lines) < n {
		f.lines = make([]profile.Line, n)
		f.fns = make([]profile.Function, n)
	}
	f.lines, f.fns = f.lines[:n], f.fns[:n]
	for i, ln := range lines {
		fn := &t.Functions[t.FunctionIndex(ln.Function)] // Read resolved it
		f.fns[i] = profile.Function{Name: t.String(fn.Name), Filename: t.String(fn.Filename)}
		f.lines[i] = profile.Line{Line: int64(ln.Line), Function: &f.fns[i]}
	}
	f.loc.Line = f.lines
	return pprofx.LocationFrames(dst, &f.loc)
}
