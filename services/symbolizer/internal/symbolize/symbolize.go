// Package symbolize fills in the functions and source lines of a profile's
// unsymbolized locations from the debug information of their binaries.
package symbolize

import (
	"context"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"

	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// Tables finds the symbol table of a build ID; nil means nobody has it.
type Tables interface {
	Table(ctx context.Context, buildID string) *symtab.Table
}

// Fallbacks is implemented by Tables that can offer the same binary's
// table from a later source when a table cannot resolve an address.
type Fallbacks interface {
	Fallback(ctx context.Context, after *symtab.Table) *symtab.Table
}

// Cache is implemented by Tables that can answer from memory without
// fetching: a profile whose binaries are all known then starts no lookup.
type Cache interface {
	Cached(buildID string) (*symtab.Table, bool)
}

// Source labels for frames that no table resolved.
const (
	SourceUnresolved = "unresolved"
	SourceAlready    = "presymbolized" // frames the agent named (kernel, python, java, js, jit), scraped Go profiles
)

// agentNamed reports a location the agent named itself: its mapping is one
// of record's pseudo-files (kernel, python, java, js, jit). No debug info
// exists for a pseudo-file, so such a location is never looked up, needs
// no build ID, and is written exactly as it came, even without lines.
func agentNamed(loc *profile.Location) bool {
	return loc.Mapping != nil && record.FrameKind(loc.Mapping.File) != record.KindNative
}

// Stats counts what one profile's symbolization did.
type Stats struct {
	Resolved    map[string]int // locations resolved, by source of the table
	Unresolved  int            // locations named binary+0xoffset
	Already     int            // locations that arrived with lines or on a pseudo-file
	AddrHits    int            // lookups answered by a table's address cache
	AddrLookups int
	// OverBudget is 1 when the record's lookup budget ended before every
	// build ID was answered; those binaries' frames stay addresses.
	OverBudget int
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	if s.Resolved == nil {
		s.Resolved = map[string]int{}
	}
	for k, v := range o.Resolved {
		s.Resolved[k] += v
	}
	s.Unresolved += o.Unresolved
	s.Already += o.Already
	s.AddrHits += o.AddrHits
	s.AddrLookups += o.AddrLookups
	s.OverBudget += o.OverBudget
}

// Symbolizer rewrites profiles in place.
type Symbolizer struct {
	Tables Tables
	// Concurrency is how many build IDs of one profile are looked up at
	// once; 0 means 4. The Tables bound the fetches of all profiles.
	Concurrency int
	// Budget bounds the time one profile waits for its lookups; 0 means
	// no bound. Frames of binaries not found in time keep their address.
	Budget time.Duration
}

// lookup finds the tables of the build IDs of p's mappings that have
// locations left to resolve, Concurrency at a time, within Budget.
func (s *Symbolizer) lookup(ctx context.Context, p *profile.Profile) (context.Context, context.CancelFunc, map[string]*symtab.Table, int) {
	// Only mappings with locations left to resolve need a table.
	var ids []string
	tabs := make(map[string]*symtab.Table, len(p.Mapping))
	cache, _ := s.Tables.(Cache)
	seen := make(map[*profile.Mapping]bool, len(p.Mapping))
	for _, loc := range p.Location {
		m := loc.Mapping
		if len(loc.Line) > 0 || m == nil || m.BuildID == "" || seen[m] || agentNamed(loc) {
			continue
		}
		seen[m] = true
		if _, ok := tabs[m.BuildID]; ok {
			continue
		}
		if cache != nil {
			if tab, ok := cache.Cached(m.BuildID); ok {
				tabs[m.BuildID] = tab
				continue
			}
		}
		tabs[m.BuildID] = nil
		ids = append(ids, m.BuildID)
	}
	cancel := context.CancelFunc(func() {})
	if s.Budget > 0 && len(ids) > 0 {
		ctx, cancel = context.WithTimeout(ctx, s.Budget)
	}
	workers := s.Concurrency
	if workers <= 0 {
		workers = 4
	}
	workers = min(workers, len(ids))
	if workers <= 1 {
		for _, id := range ids {
			tabs[id] = s.Tables.Table(ctx, id)
		}
		return ctx, cancel, tabs, len(ids)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range workers {
		wg.Go(func() {
			for id := range next {
				tab := s.Tables.Table(ctx, id)
				mu.Lock()
				tabs[id] = tab
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	return ctx, cancel, tabs, len(ids)
}

type funcKey struct{ name, system, file string }

// emptied empties *m, making it when it is nil, and returns it.
func emptied[K comparable, V any](m *map[K]V) map[K]V {
	if *m == nil {
		*m = make(map[K]V)
	}
	clear(*m)
	return *m
}

// Profile resolves every location of p that has no lines yet. A location
// that cannot be resolved keeps its address and mapping and gets one line
// whose function is "binary+0xfileoffset", so no sample loses a frame.
func (s *Symbolizer) Profile(ctx context.Context, p *profile.Profile) Stats {
	return s.Locations(ctx, p, callerOnlyLocations(p), nil)
}

// Scratch is the memory Locations keeps from one profile for the next:
// the functions and lines it adds, and its maps (most of what it
// allocated). The functions and lines Locations added to a profile with a
// Scratch are valid until the Scratch is used again. The zero value is
// ready; a Scratch serves one Locations call at a time.
type Scratch struct {
	funcs  map[funcKey]*profile.Function
	byFunc map[*symtab.Func]*profile.Function
	fns    []profile.Function
	lines  []profile.Line
}

// Locations is Profile for a profile whose samples are not decoded: it reads
// and changes only p's Mapping, Location and Function tables. callerOnly
// reports the locations that appear in samples only below the leaf. sc,
// when not nil, provides the memory (see Scratch).
func (s *Symbolizer) Locations(ctx context.Context, p *profile.Profile, callerOnly func(*profile.Location) bool, sc *Scratch) Stats {
	if sc == nil {
		sc = new(Scratch)
	}
	st := Stats{Resolved: map[string]int{}}
	funcs := emptied(&sc.funcs)
	var nextID uint64
	for _, f := range p.Function {
		funcs[funcKey{f.Name, f.SystemName, f.Filename}] = f
		nextID = max(nextID, f.ID)
	}
	// Functions and lines are handed out from slabs: a full slab is left
	// to the locations that point into it, and the last one, the largest,
	// is kept for the next profile.
	fslab := sc.fns[:0]
	defer func() { sc.fns = fslab }()
	newFunction := func(name, system, file string) *profile.Function {
		if len(fslab) == cap(fslab) {
			fslab = make([]profile.Function, 0, max(256, 2*cap(fslab)))
		}
		nextID++
		fslab = append(fslab, profile.Function{ID: nextID, Name: name, SystemName: system, Filename: file})
		f := &fslab[len(fslab)-1]
		p.Function = append(p.Function, f)
		return f
	}
	// function finds or adds a function by its strings: for names made
	// here (unresolved frames), which must not repeat.
	function := func(name, system, file string) *profile.Function {
		k := funcKey{name, system, file}
		if f, ok := funcs[k]; ok {
			return f
		}
		f := newFunction(name, system, file)
		funcs[k] = f
		return f
	}
	// A table hands out one *Func per function: the pointer names the
	// function as well as its strings do, and hashes much faster.
	byFunc := emptied(&sc.byFunc)
	// One slab for the lines of every location, as most have one.
	slab := sc.lines[:0]
	if want := len(p.Location) + len(p.Location)/4; cap(slab) < want {
		slab = make([]profile.Line, 0, want)
	}
	defer func() { sc.lines = slab }()
	lines := func(n int) []profile.Line {
		if len(slab)+n > cap(slab) {
			slab = make([]profile.Line, 0, max(n, 2*cap(slab)))
		}
		l := slab[len(slab) : len(slab)+n : len(slab)+n]
		slab = slab[:len(slab)+n]
		return l
	}
	fallbacks, _ := s.Tables.(Fallbacks)
	bctx, cancel, byID, asked := s.lookup(ctx, p)
	defer cancel()
	if asked > 0 && bctx.Err() != nil {
		// Some lookups may have gone unanswered: the record's or its
		// poll's budget ran out (or the instance is stopping, when the
		// record is not written anyway).
		st.OverBudget = 1
	}
	ctx = bctx

	for _, loc := range p.Location {
		if len(loc.Line) > 0 || agentNamed(loc) {
			st.Already++
			continue
		}
		m := loc.Mapping
		var tab *symtab.Table
		if m != nil && m.BuildID != "" {
			tab = byID[m.BuildID]
		}
		// A caller's address is the return address, the instruction after
		// the call, which can belong to the next line or even the next
		// function; one byte back is inside the call instruction.
		addr := loc.Address
		if callerOnly(loc) && addr > 0 {
			addr--
		}
		var frames []symtab.Frame
		for t := tab; t != nil; {
			if vaddr, ok := t.Vaddr(addr, m.Start, m.Offset); ok {
				var hit bool
				frames, hit = t.CachedLookup(vaddr)
				st.AddrLookups++
				if hit {
					st.AddrHits++
				}
			}
			if len(frames) > 0 || fallbacks == nil {
				tab = t
				break
			}
			t = fallbacks.Fallback(ctx, t)
		}
		if len(frames) == 0 {
			name := unresolvedName(loc)
			loc.Line = lines(1)
			loc.Line[0] = profile.Line{Function: function(name, name, "")}
			st.Unresolved++
			continue
		}
		loc.Line = lines(len(frames))
		for i := range frames {
			f := frames[i]
			fn, ok := byFunc[f.Func]
			if !ok {
				fn = newFunction(capName(f.Function), capName(f.SystemName), capName(f.File))
				byFunc[f.Func] = fn
			}
			loc.Line[i] = profile.Line{Function: fn, Line: f.Line}
		}
		st.Resolved[tab.Source]++
		m.HasFunctions = true
		if frames[0].Line != 0 {
			m.HasFilenames, m.HasLineNumbers = true, true
		}
		if len(frames) > 1 {
			m.HasInlineFrames = true
		}
	}
	return st
}

// MaxNameBytes bounds a function or file name the symbolizer writes. Debug
// info comes from outside (the debuginfo topic, debuginfod): a name of
// megabytes would make every sample through it too large for a record and
// past the string limit of the consumers downstream (64 KiB). The longest
// demangled C++ names seen in practice are a few KiB.
const MaxNameBytes = 8 << 10

// capName cuts s to MaxNameBytes on a UTF-8 boundary, marking the cut.
func capName(s string) string {
	if len(s) <= MaxNameBytes {
		return s
	}
	return record.TruncateUTF8(s, MaxNameBytes-len("…")) + "…"
}

// callerOnlyLocations reports the locations that appear in samples only
// below the leaf, whose addresses are return addresses. A location that is
// also some sample's leaf keeps its exact address.
func callerOnlyLocations(p *profile.Profile) func(*profile.Location) bool {
	const leaf, caller = 1, 2
	// Location IDs are 1..n in the profiles agents write: a slice is
	// cheaper than a map then.
	dense := true
	for _, l := range p.Location {
		if l.ID == 0 || l.ID > uint64(len(p.Location)) {
			dense = false
			break
		}
	}
	if dense {
		marks := make([]uint8, len(p.Location)+1)
		for _, smp := range p.Sample {
			for i, l := range smp.Location {
				if i == 0 {
					marks[l.ID] |= leaf
				} else {
					marks[l.ID] |= caller
				}
			}
		}
		return func(l *profile.Location) bool { return marks[l.ID] == caller }
	}
	marks := make(map[*profile.Location]uint8, len(p.Location))
	for _, smp := range p.Sample {
		for i, l := range smp.Location {
			if i == 0 {
				marks[l] |= leaf
			} else {
				marks[l] |= caller
			}
		}
	}
	return func(l *profile.Location) bool { return marks[l] == caller }
}

// unresolvedName is "binary+0xoffset" with the file offset, which
// `addr2line -e binary` and objdump accept once debug info is at hand.
func unresolvedName(loc *profile.Location) string {
	m := loc.Mapping
	if m == nil {
		return "unknown+0x" + strconv.FormatUint(loc.Address, 16)
	}
	bin := filepath.Base(m.File)
	switch {
	case m.File == "" && m.BuildID != "":
		bin = m.BuildID
	case m.File == "":
		bin = "unknown"
	}
	off := loc.Address
	if loc.Address >= m.Start {
		off = loc.Address - m.Start + m.Offset
	}
	return bin + "+0x" + strconv.FormatUint(off, 16)
}
