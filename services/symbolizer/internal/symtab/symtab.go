// Package symtab turns the debug information of one binary into a table that
// maps virtual addresses to source frames: ELF symbol tables, Go pclntab,
// DWARF line tables with inlined subroutines, or the debuginfo topic format.
package symtab

import (
	"cmp"
	"slices"
	"sort"
	"sync"

	"github.com/ianlancetaylor/demangle"

	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// Frame is one source position of an address. A lookup returns the innermost
// (inlined) frame first, the physical function last, the order of pprof's
// Location.Line.
type Frame struct {
	*Func
	Line int64
}

// Func is a function as pprof names it. A table hands out one *Func per
// distinct function, so callers can use the pointer as its identity.
type Func struct {
	Function   string // demangled, for people
	SystemName string // as found in the binary
	File       string
}

// pageSize is the mapping granularity of the kernel on the architectures the
// agent supports (x86_64, arm64 with 4 KiB pages): a mapping starts at the
// page holding its segment's first byte.
const pageSize = 4096

// addrCacheMax bounds the per-binary cache of resolved addresses; when full
// it starts over, which keeps hot addresses cheap without an LRU's upkeep.
const addrCacheMax = 1 << 16

// segment is an executable PT_LOAD segment.
type segment struct {
	offset, vaddr, filesz, memsz uint64
	// offsetKnown is false for separate debug files (objcopy
	// --only-keep-debug), whose program headers keep addresses and sizes but
	// not file offsets.
	offsetKnown bool
}

type symbol struct {
	addr, end uint64
	sys       string // demangled on first lookup (readable)
}

type lineRow struct {
	addr uint64
	file uint32 // index into Table.files
	line uint32 // 0: no line information from addr on
}

// Table resolves virtual addresses of one binary. It is safe for concurrent use.
type Table struct {
	BuildID string
	// Source names where the table came from (topic, local, debuginfod).
	Source string
	// Skipped says which parts of the file were left out for Limits.
	Skipped error

	size int // estimated bytes of the tables, without the caches

	segments []segment
	syms     []symbol  // sorted by addr
	lines    []lineRow // sorted by addr
	files    []string
	subs     []subRange // DWARF subprograms, sorted by low
	gosym    *goTable

	mu       sync.Mutex
	cache    map[uint64][]Frame
	funcs    map[Func]*Func
	readable map[string]string // demangled names, filled on first lookup
}

// Empty reports whether the table has nothing to resolve addresses with.
func (t *Table) Empty() bool {
	return len(t.syms) == 0 && len(t.subs) == 0 && t.gosym == nil
}

// Bytes estimates the memory the table holds: its sorted tables, names
// and the lookup caches as filled so far. Tables are evicted by it.
func (t *Table) Bytes() int {
	t.mu.Lock()
	n := len(t.cache)*cacheEntryBytes + len(t.funcs)*funcEntryBytes + len(t.readable)*readableEntryBytes
	t.mu.Unlock()
	return t.size + n
}

// Per-element costs of estimateBytes, rounded up from the struct sizes and
// the maps' overhead.
const (
	symbolBytes   = 40
	lineBytes     = 16
	scopeBytes    = 160
	subRangeBytes = 24
	// The lookup caches, per entry: an address with its frames, a
	// function handed out once (funcs), a demangled name. Measured with
	// runtime.MemStats, one function per address, maps grown from empty,
	// 10 to 5,000 addresses a table: 196-283 bytes of heap per address
	// with plain names (the most just after a map doubled), 262-379 with
	// mangled ones; charged 304 and 400. The first entries' map groups
	// are in tableBytes.
	cacheEntryBytes    = 208
	funcEntryBytes     = 96
	readableEntryBytes = 96
	// tableBytes is the Table itself and its lookup maps' first groups
	// (measured: 739 bytes with one address looked up).
	tableBytes = 1024
	// gosym builds a function table from pclntab about its size again.
	goTableFactor = 3
)

func (t *Table) estimateBytes() int {
	n := tableBytes + len(t.segments)*40 + len(t.syms)*symbolBytes + len(t.lines)*lineBytes + len(t.subs)*subRangeBytes
	for _, s := range t.syms {
		n += len(s.sys)
	}
	for _, f := range t.files {
		n += 16 + len(f)
	}
	seen := map[*scope]bool{}
	var walk func(s *scope)
	walk = func(s *scope) {
		if seen[s] {
			return
		}
		seen[s] = true
		n += scopeBytes + 16*len(s.ranges) + len(s.name) + len(s.callFile)
		if s.sys != s.name {
			n += len(s.sys)
		}
		for _, c := range s.children {
			walk(c)
		}
	}
	for _, r := range t.subs {
		walk(r.node)
	}
	if t.gosym != nil {
		n += goTableFactor * t.gosym.bytes
	}
	return n
}

// Vaddr converts a runtime address inside a mapping (start, limit, file
// offset of start) into the binary's virtual address.
func (t *Table) Vaddr(addr, start, offset uint64) (uint64, bool) {
	if addr < start {
		return 0, false
	}
	fileOff := addr - start + offset
	for _, s := range t.segments {
		if s.offsetKnown && fileOff >= s.offset && fileOff < s.offset+s.filesz {
			return fileOff - s.offset + s.vaddr, true
		}
	}
	// A debug file lost the offsets: the mapping starts at the page that
	// holds the segment's first byte, so the distance from the mapping start
	// is the distance from that page.
	for _, s := range t.segments {
		if s.offsetKnown {
			continue
		}
		v := addr - start + s.vaddr&^(pageSize-1)
		if v >= s.vaddr && v < s.vaddr+s.memsz {
			return v, true
		}
	}
	return 0, false
}

// Lookup returns the frames of vaddr, innermost first, or nil when the
// table does not cover it.
func (t *Table) Lookup(vaddr uint64) []Frame {
	t.mu.Lock()
	fr, ok := t.cache[vaddr]
	t.mu.Unlock()
	if ok {
		return fr
	}
	fr = t.lookup(vaddr)
	t.mu.Lock()
	// Grown from empty, not made for 1,024 entries: that took 213 KB a
	// table before its first address, uncharged, with a few dozen
	// functions ever looked up in most binaries.
	if t.cache == nil || len(t.cache) >= addrCacheMax {
		t.cache = make(map[uint64][]Frame)
	}
	if t.funcs == nil || len(t.funcs) >= addrCacheMax {
		t.funcs = make(map[Func]*Func)
	}
	for i := range fr {
		if f, ok := t.funcs[*fr[i].Func]; ok {
			fr[i].Func = f
		} else {
			t.funcs[*fr[i].Func] = fr[i].Func
		}
	}
	t.cache[vaddr] = fr
	t.mu.Unlock()
	return fr
}

// CachedLookup is Lookup that also says whether the answer came from the
// address cache.
func (t *Table) CachedLookup(vaddr uint64) ([]Frame, bool) {
	t.mu.Lock()
	fr, ok := t.cache[vaddr]
	t.mu.Unlock()
	if ok {
		return fr, true
	}
	return t.Lookup(vaddr), false
}

func (t *Table) lookup(pc uint64) []Frame {
	if fr := t.lookupDWARF(pc); fr != nil {
		return fr
	}
	if t.gosym != nil {
		if fr := t.gosym.lookup(pc); fr != nil {
			return fr
		}
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > pc }) - 1
	if i < 0 {
		return nil
	}
	s := t.syms[i]
	if pc >= s.end {
		return nil
	}
	f := Frame{Func: &Func{Function: t.readableName(s.sys), SystemName: s.sys}}
	if row, ok := t.lineAt(pc); ok && row.addr >= s.addr {
		f.File, f.Line = t.files[row.file], int64(row.line)
	}
	return []Frame{f}
}

// lineAt returns the line-table row covering pc.
func (t *Table) lineAt(pc uint64) (lineRow, bool) {
	j := sort.Search(len(t.lines), func(j int) bool { return t.lines[j].addr > pc }) - 1
	if j < 0 || t.lines[j].line == 0 {
		return lineRow{}, false
	}
	return t.lines[j], true
}

// finishSymbols sorts syms and gives zero-sized symbols the extent up to the
// next symbol, as ELF assembly routines often lack a size.
func (t *Table) finishSymbols() {
	slices.SortFunc(t.syms, func(a, b symbol) int { return cmp.Compare(a.addr, b.addr) })
	// Drop duplicates (aliases at one address): keep the first, which after a
	// stable order is arbitrary but deterministic; prefer a sized one.
	out := t.syms[:0]
	for _, s := range t.syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			if out[n-1].end == out[n-1].addr && s.end > s.addr {
				out[n-1] = s
			}
			continue
		}
		out = append(out, s)
	}
	t.syms = out
	for i := range t.syms {
		if t.syms[i].end <= t.syms[i].addr {
			if i+1 < len(t.syms) {
				t.syms[i].end = t.syms[i+1].addr
			} else {
				t.syms[i].end = t.syms[i].addr + 1
			}
		}
	}
}

// internFile returns the index of file in t.files.
func (t *Table) internFile(idx map[string]uint32, file string) uint32 {
	if i, ok := idx[file]; ok {
		return i
	}
	i := uint32(len(t.files))
	t.files = append(t.files, file)
	idx[file] = i
	return i
}

// readableName demangles sys once per table: demangling every symbol of a
// large C++ library at load costs more than the few that ever show up.
func (t *Table) readableName(sys string) string {
	if len(sys) < 2 || (sys[0] != '_' && sys[0] != '.') {
		return sys
	}
	t.mu.Lock()
	name, ok := t.readable[sys]
	t.mu.Unlock()
	if ok {
		return name
	}
	name = Demangle(sys)
	t.mu.Lock()
	if t.readable == nil || len(t.readable) >= addrCacheMax {
		t.readable = map[string]string{}
	}
	t.readable[sys] = name
	t.mu.Unlock()
	return name
}

// Demangle returns the readable form of a C++ or Rust symbol name, without
// parameter lists (as pprof shows them), or name itself.
func Demangle(name string) string {
	if len(name) < 2 || (name[0] != '_' && name[0] != '.') {
		return name
	}
	return demangle.Filter(name, demangle.NoParams, demangle.NoClones)
}

// FromDebuginfo builds a table from a debuginfo topic value of kind
// KindSymbols.
func FromDebuginfo(f *debuginfo.File, source string) *Table {
	t := &Table{BuildID: f.BuildID, Source: source}
	for _, s := range f.Segments {
		t.segments = append(t.segments, segment{offset: s.Offset, vaddr: s.Vaddr, filesz: s.Filesz, memsz: s.Filesz, offsetKnown: true})
	}
	t.syms = make([]symbol, 0, len(f.Symbols))
	for _, s := range f.Symbols {
		t.syms = append(t.syms, symbol{addr: s.Addr, end: s.Addr + s.Size, sys: s.Name})
	}
	t.finishSymbols()
	idx := map[string]uint32{}
	t.lines = make([]lineRow, 0, len(f.Lines))
	for _, l := range f.Lines {
		t.lines = append(t.lines, lineRow{addr: l.Addr, file: t.internFile(idx, l.File), line: l.Line})
	}
	slices.SortStableFunc(t.lines, func(a, b lineRow) int { return cmp.Compare(a.addr, b.addr) })
	t.size = t.estimateBytes()
	return t
}
