package symtab

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// ErrNoSymbols means a binary carries nothing to symbolize with (stripped,
// no DWARF, no pclntab); a source treats it as not found.
var ErrNoSymbols = errors.New("binary has no symbols, DWARF or Go pclntab")

// ErrSectionTooLarge means sections of an ELF file would inflate beyond
// Limits; they are not read, and the table is built from the others.
var ErrSectionTooLarge = errors.New("elf sections too large")

// Limits bound the memory reading one ELF file takes. A compressed section
// (SHF_COMPRESSED, .zdebug_*) states its inflated size, and debug/elf
// inflates it to that size: a 509 KiB file can claim gigabytes. Each part
// of the table (symbol tables, DWARF, Go pclntab) is read only when its
// sections fit, with their sizes as stated.
type Limits struct {
	// MaxSectionBytes bounds one section as inflated.
	MaxSectionBytes int64
	// MaxFileBytes bounds the sections read from one file together.
	MaxFileBytes int64
}

// DefaultLimits are the limits of FromELF.
func DefaultLimits() Limits {
	return Limits{MaxSectionBytes: 64 << 20, MaxFileBytes: 128 << 20}
}

// FromELF builds a table from an ELF executable, shared object or separate
// debug file, within DefaultLimits.
func FromELF(r io.ReaderAt, buildID, source string) (*Table, error) {
	return FromELFLimits(r, buildID, source, DefaultLimits())
}

// FromELFLimits builds a table from an ELF file, reading only sections
// within lim; what was left out is in the table's Skipped. Files come from
// servers and disks the symbolizer does not control: a parser panic on a
// malformed file is returned as an error.
func FromELFLimits(r io.ReaderAt, buildID, source string, lim Limits) (t *Table, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("read elf: malformed file: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("read elf: %w", err)
	}
	defer ef.Close()
	t = &Table{BuildID: buildID, Source: source}
	budget := &sectionBudget{lim: lim, left: lim.MaxFileBytes}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		t.segments = append(t.segments, segment{
			offset: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz,
			offsetKnown: p.Filesz > 0,
		})
	}
	for _, load := range []struct {
		typ  elf.SectionType
		read func() ([]elf.Symbol, error)
	}{{elf.SHT_SYMTAB, ef.Symbols}, {elf.SHT_DYNSYM, ef.DynamicSymbols}} {
		if !budget.take(symbolSections(ef, load.typ)...) {
			continue
		}
		syms, err := load.read()
		if err != nil {
			continue // ErrNoSymbols from debug/elf: this table is absent
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF {
				continue
			}
			t.syms = append(t.syms, symbol{addr: s.Value, end: s.Value + s.Size, sys: s.Name})
		}
	}
	t.finishSymbols()
	if !budget.take(dwarfSections(ef)...) {
		// Lines and inlines are lost, the symbol tables are kept.
	} else if d, err := ef.DWARF(); err == nil {
		// Every DIE takes at least one byte of .debug_info: more entries
		// than bytes means a corrupt file is making debug/dwarf go round.
		budget := 1 << 20
		if s := ef.Section(".debug_info"); s != nil {
			budget = int(min(s.Size, 1<<34)) + 1024
		}
		// Broken DWARF loses lines and inlines, not the symbol table.
		_ = t.loadDWARF(d, budget)
	}
	if pcln, text := ef.Section(".gopclntab"), ef.Section(".text"); pcln != nil && text != nil && pcln.Type != elf.SHT_NOBITS && budget.take(pcln) {
		if data, err := pcln.Data(); err == nil {
			if tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr)); err == nil {
				t.gosym = &goTable{tab: tab, bytes: len(data)}
			}
		}
	}
	t.Skipped = errors.Join(budget.skipped...)
	if t.Empty() {
		if t.Skipped != nil {
			return nil, fmt.Errorf("read elf: %w", t.Skipped)
		}
		return nil, ErrNoSymbols
	}
	t.size = t.estimateBytes()
	return t, nil
}

// sectionBudget hands out the bytes of Limits to the parts of a table.
type sectionBudget struct {
	lim     Limits
	left    int64
	skipped []error
}

// take reports whether secs fit, as inflated, and counts them if so.
func (b *sectionBudget) take(secs ...*elf.Section) bool {
	var sum int64
	for _, s := range secs {
		n := inflatedSize(s)
		if n > b.lim.MaxSectionBytes {
			b.skipped = append(b.skipped, fmt.Errorf("%w: %s inflates to %d bytes, limit %d per section (STACKSTREAM_SYMBOLIZER_MAX_SECTION_BYTES)", ErrSectionTooLarge, s.Name, n, b.lim.MaxSectionBytes))
			return false
		}
		sum += n
	}
	if sum > b.left {
		names := make([]string, 0, len(secs))
		for _, s := range secs {
			names = append(names, s.Name)
		}
		b.skipped = append(b.skipped, fmt.Errorf("%w: %v inflate to %d bytes, %d left of %d per file (STACKSTREAM_SYMBOLIZER_MAX_ELF_BYTES)", ErrSectionTooLarge, names, sum, b.left, b.lim.MaxFileBytes))
		return false
	}
	b.left -= sum
	return true
}

// inflatedSize is the size debug/elf makes of s when it reads it: the size
// a compressed section states, else its size in the file.
func inflatedSize(s *elf.Section) int64 {
	if s.Type == elf.SHT_NOBITS {
		return 0
	}
	size := s.Size // SHF_COMPRESSED: the header's stated size
	if s.Flags&elf.SHF_COMPRESSED == 0 && strings.HasPrefix(s.Name, ".zdebug") {
		var h [12]byte
		if n, _ := s.ReadAt(h[:], 0); n == len(h) && string(h[:4]) == "ZLIB" {
			size = binary.BigEndian.Uint64(h[4:])
		}
	}
	return int64(min(size, 1<<62))
}

// symbolSections are the sections of the symbol table of type typ and its
// string table.
func symbolSections(ef *elf.File, typ elf.SectionType) []*elf.Section {
	var out []*elf.Section
	for _, s := range ef.Sections {
		if s.Type == typ {
			out = append(out, s)
			if int(s.Link) < len(ef.Sections) {
				out = append(out, ef.Sections[s.Link])
			}
			break
		}
	}
	return out
}

// dwarfSections are the sections ef.DWARF reads: every .debug_* and
// .zdebug_* section, and their relocations in relocatable files.
func dwarfSections(ef *elf.File) []*elf.Section {
	var out []*elf.Section
	for _, s := range ef.Sections {
		name := strings.TrimPrefix(strings.TrimPrefix(s.Name, ".rela"), ".rel")
		if strings.HasPrefix(name, ".debug_") || strings.HasPrefix(name, ".zdebug_") {
			out = append(out, s)
		}
	}
	return out
}

// goTable answers from the Go runtime's own pc tables, which survive
// `go build -ldflags=-s -w`.
type goTable struct {
	tab   *gosym.Table
	bytes int // of the pclntab it reads
}

func (g *goTable) lookup(pc uint64) []Frame {
	fn := g.tab.PCToFunc(pc)
	if fn == nil {
		return nil
	}
	file, line, _ := g.tab.PCToLine(pc)
	return []Frame{{Func: &Func{Function: fn.Name, SystemName: fn.Name, File: file}, Line: int64(line)}}
}

// scope is a DWARF subprogram or inlined subroutine with the inlined calls
// inside it.
type scope struct {
	ranges   [][2]uint64
	die      dwarf.Offset // where the name comes from (abstract origin for inlines)
	name     string
	sys      string
	callFile string // for an inlined call: where it was called from
	callLine int64
	children []*scope
}

func (s *scope) contains(pc uint64) bool {
	for _, r := range s.ranges {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

type subRange struct {
	low, high uint64
	node      *scope
}

// funcInfo is what a subprogram DIE says of its name.
type funcInfo struct {
	name, linkage string
	spec, origin  dwarf.Offset
}

// errDWARFLoop stops reading DWARF that yields more entries than it has bytes.
var errDWARFLoop = errors.New("read dwarf: more entries than .debug_info has bytes")

func (t *Table) loadDWARF(d *dwarf.Data, budget int) error {
	infos := map[dwarf.Offset]funcInfo{}
	var scopes []*scope
	fileIdx := map[string]uint32{}
	for _, f := range t.files {
		fileIdx[f] = uint32(len(fileIdx))
	}
	r := d.Reader()
	w := &dwarfWalker{d: d, r: r, infos: infos, budget: budget}
	for {
		cu, err := w.next()
		if err != nil {
			return err
		}
		if cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit {
			r.SkipChildren()
			continue
		}
		var files []*dwarf.LineFile
		if lr, err := d.LineReader(cu); err == nil && lr != nil {
			var e dwarf.LineEntry
			for lr.Next(&e) == nil && w.budget > 0 {
				w.budget--
				if e.EndSequence {
					t.lines = append(t.lines, lineRow{addr: e.Address})
					continue
				}
				if e.File == nil {
					continue
				}
				t.lines = append(t.lines, lineRow{addr: e.Address, file: t.internFile(fileIdx, e.File.Name), line: uint32(e.Line)})
			}
			files = lr.Files()
		}
		if !cu.Children {
			continue
		}
		w.files = files
		if err := w.walk(nil, &scopes); err != nil {
			return err
		}
	}
	slices.SortStableFunc(t.lines, func(a, b lineRow) int {
		// An end of sequence and the start of the next one can share an
		// address: the start must win, so it sorts last.
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return cmp.Compare(min(a.line, 1), min(b.line, 1))
	})
	var resolve func(s *scope)
	resolve = func(s *scope) {
		s.name, s.sys = funcName(infos, s.die)
		for _, c := range s.children {
			resolve(c)
		}
	}
	for _, s := range scopes {
		resolve(s)
		for _, rg := range s.ranges {
			t.subs = append(t.subs, subRange{low: rg[0], high: rg[1], node: s})
		}
	}
	slices.SortFunc(t.subs, func(a, b subRange) int { return cmp.Compare(a.low, b.low) })
	return nil
}

// funcName follows specification and abstract origin links to the best name
// of a function: its linkage name (demangled when looked up), else its plain
// name.
func funcName(infos map[dwarf.Offset]funcInfo, off dwarf.Offset) (name, sys string) {
	var plain string
	for hops := 0; hops < 8; hops++ {
		fi, ok := infos[off]
		if !ok {
			break
		}
		if fi.linkage != "" {
			return fi.linkage, fi.linkage
		}
		if plain == "" {
			plain = fi.name
		}
		switch {
		case fi.spec != 0:
			off = fi.spec
		case fi.origin != 0:
			off = fi.origin
		default:
			return plain, plain
		}
	}
	return plain, plain
}

type dwarfWalker struct {
	d      *dwarf.Data
	r      *dwarf.Reader
	files  []*dwarf.LineFile
	infos  map[dwarf.Offset]funcInfo
	budget int // entries and line rows left to read
}

func (w *dwarfWalker) next() (*dwarf.Entry, error) {
	if w.budget <= 0 {
		return nil, errDWARFLoop
	}
	w.budget--
	e, err := w.r.Next()
	if err != nil {
		return nil, fmt.Errorf("read dwarf: %w", err)
	}
	return e, nil
}

// walk reads the children of the entry just read, up to their end marker,
// attaching scopes to parent (or to top when parent is nil).
func (w *dwarfWalker) walk(parent *scope, top *[]*scope) error {
	for {
		e, err := w.next()
		if err != nil {
			return err
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		next := parent
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			fi := funcInfo{}
			fi.name, _ = e.Val(dwarf.AttrName).(string)
			fi.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
			if fi.linkage == "" {
				fi.linkage, _ = e.Val(dwarf.Attr(0x2007)).(string) // DW_AT_MIPS_linkage_name, older compilers
			}
			fi.spec, _ = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
			fi.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
			w.infos[e.Offset] = fi
			rs, _ := w.d.Ranges(e)
			if len(rs) == 0 {
				break
			}
			s := &scope{ranges: rs, die: e.Offset}
			if e.Tag == dwarf.TagInlinedSubroutine && parent != nil {
				if i, ok := e.Val(dwarf.AttrCallFile).(int64); ok && i >= 0 && int(i) < len(w.files) && w.files[i] != nil {
					s.callFile = w.files[i].Name
				}
				s.callLine, _ = e.Val(dwarf.AttrCallLine).(int64)
				parent.children = append(parent.children, s)
			} else {
				*top = append(*top, s)
			}
			next = s
		}
		if e.Children {
			if err := w.walk(next, top); err != nil {
				return err
			}
		}
	}
}

// lookupDWARF walks from the subprogram holding pc down through the inlined
// calls that hold it, innermost frame first.
func (t *Table) lookupDWARF(pc uint64) []Frame {
	i := sort.Search(len(t.subs), func(i int) bool { return t.subs[i].low > pc }) - 1
	if i < 0 || pc >= t.subs[i].high {
		return nil
	}
	chain := []*scope{t.subs[i].node}
	for {
		n := chain[len(chain)-1]
		var in *scope
		for _, c := range n.children {
			if c.contains(pc) {
				in = c
				break
			}
		}
		if in == nil {
			break
		}
		chain = append(chain, in)
	}
	var file string
	var line int64
	if row, ok := t.lineAt(pc); ok {
		file, line = t.files[row.file], int64(row.line)
	}
	frames := make([]Frame, 0, len(chain))
	for k := len(chain) - 1; k >= 0; k-- {
		s := chain[k]
		name, sys := s.name, s.sys
		if name == "" && k == 0 {
			if j := sort.Search(len(t.syms), func(j int) bool { return t.syms[j].addr > pc }) - 1; j >= 0 && pc < t.syms[j].end {
				name, sys = t.readableName(t.syms[j].sys), t.syms[j].sys
			}
		} else if name == sys {
			name = t.readableName(sys)
		}
		frames = append(frames, Frame{Func: &Func{Function: name, SystemName: sys, File: file}, Line: line})
		file, line = s.callFile, s.callLine
	}
	return frames
}
