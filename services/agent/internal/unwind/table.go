// Package unwind compiles the call-frame information of an x86-64 or arm64
// ELF file (.eh_frame, and .debug_frame where present) into a compact, sorted
// table of unwind rows that the BPF unwinder binary-searches: for every
// instruction address, how to find the caller's stack pointer (the canonical
// frame address, CFA), its frame pointer and its return address.
//
// Only what an x86-64 unwinder needs survives: the CFA as rsp+N or rbp+N (or
// the PLT expression, or *(rsp+N)+K; or another register plus N, which only
// the first frame and the one a signal interrupted can follow), rbp as saved at CFA+N or unchanged, and the return
// address, which the psABI places at CFA-8. Anything else is kept as a row
// the unwinder knows it cannot follow, so it stops there and says why. On
// arm64 the same 8-byte rows say where the return address is too (arm64.go).
package unwind

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
)

// Arch is the instruction set of a table: the rows' registers and where the
// return address is differ.
type Arch uint8

const (
	ArchX86_64 Arch = iota
	ArchArm64
)

func (a Arch) String() string {
	if a == ArchArm64 {
		return "arm64"
	}
	return "x86-64"
}

// hostArch is the agent's: the tables it loads are for the code its BPF
// program walks, so files of another architecture (run under an emulator)
// get none.
var hostArch = map[string]Arch{"arm64": ArchArm64}[runtime.GOARCH]

// Sentinel errors of Compile and of the parsers under it.
var (
	ErrInvalid     = errors.New("invalid call-frame information")
	ErrTooLarge    = errors.New("call-frame information too large")
	ErrUnsupported = errors.New("unsupported object file")

	errRowLimit = errors.New("row limit")
)

// Limits bound the work and memory of compiling one file's table: ELF files
// are read from other processes' mappings and may be hostile.
type Limits struct {
	MaxSectionBytes int64 // each of .eh_frame and .debug_frame (after decompression)
	MaxEntries      int   // CIEs and FDEs per section
	MaxRows         int   // rows of the compiled table
	MaxStateDepth   int   // DW_CFA_remember_state nesting
}

// DefaultLimits fit the largest binaries seen on servers (a Chromium-sized
// .eh_frame is ~20 MiB with ~400k FDEs) with room.
var DefaultLimits = Limits{
	MaxSectionBytes: 128 << 20,
	MaxEntries:      4 << 20,
	MaxRows:         16 << 20,
	MaxStateDepth:   64,
}

// Rule says how a row finds the canonical frame address.
type Rule uint8

// The values are shared with the BPF unwinder (bpf/profiler/unwind.h).
const (
	RuleNone        Rule = iota // no call-frame information covers the address
	RuleRSP                     // CFA = rsp + Offset*8
	RuleRBP                     // CFA = rbp + Offset*8
	RulePLT                     // CFA = rsp + 8 + ((rip & 15) >= Offset ? 8 : 0): a PLT stub
	RuleEnd                     // the return address is undefined: the outermost frame (_start, clone)
	RuleSignal                  // a signal trampoline (CIE augmentation "S"): registers from the kernel's signal frame
	RuleUnsupported             // a DWARF expression, a register other than rsp/rbp (see CFARegister)
	RuleDeref                   // x86-64: CFA = *(rsp + N) + K, N and K packed in Offset (see Deref)
)

// ruleMask keeps the rule of an arm64 row's Rule byte, whose bits above say
// where the return address is (arm64.go). On x86-64 they are set only on a
// RuleUnsupported row whose CFA is another general register plus an offset
// (CFARegister).
const ruleMask Rule = 0x07

// cfaRegShift: an x86-64 RuleUnsupported row whose CFA is reg + Offset*8,
// reg a general register other than rsp and rbp (rax, rdx, rcx, rbx, rsi,
// rdi, r8-r15: DWARF 0-5, 8-15), has reg+1 in the Rule byte's bits from
// here. Perlasm code (OpenSSL's libcrypto) keeps the caller's rsp in rax,
// r9 or r11 while it realigns the stack. The walk can follow such a row only
// where it knows that register: in the first frame (the sample's registers)
// and in the frame a signal interrupted (the kernel's signal frame); in any
// other frame the row is unsupported, as without the register.
const cfaRegShift = 3

func (r Rule) String() string {
	switch r & ruleMask {
	case RuleNone:
		return "none"
	case RuleRSP:
		return "rsp"
	case RuleRBP:
		return "rbp"
	case RulePLT:
		return "plt"
	case RuleEnd:
		return "end"
	case RuleSignal:
		return "signal"
	case RuleUnsupported:
		return "unsupported"
	case RuleDeref:
		return "deref"
	}
	return "unknown"
}

// RBP values other than a multiple of 8 from the CFA.
const (
	RBPUnchanged int8 = 0    // the caller's rbp is the current rbp
	RBPLost      int8 = -128 // a rule the unwinder cannot follow: rbp is unknown in the caller
)

// Row is one unwind row, 8 bytes, laid out as struct unwind_row in
// bpf/profiler/unwind.h. Offsets are in 8-byte units: on x86-64 the stack
// pointer is always 8-aligned (on arm64 16-aligned), so every CFA offset and
// every saved-register slot is a multiple of 8, and a row whose values are
// not is RuleUnsupported. On arm64 RuleRSP and RuleRBP mean sp and x29, the
// Rule byte also says where the return address is, and RBP may be that
// slot (arm64.go).
type Row struct {
	PC     uint32 // first ELF virtual address the row covers, up to the next row's
	Rule   Rule
	RBP    int8   // rbp saved at CFA + RBP*8; RBPUnchanged; RBPLost
	Offset uint16 // RuleRSP/RuleRBP/CFARegister: CFA offset / 8; RulePLT: the threshold; RuleDeref: N/8, K/8
}

// CFARegister returns the DWARF number of the general register an x86-64
// RuleUnsupported row's CFA is based on (CFA = reg + CFAOffset()), if it
// names one (cfaRegShift).
func (r Row) CFARegister() (uint8, bool) {
	reg := uint8(r.Rule >> cfaRegShift)
	if r.Rule&ruleMask != RuleUnsupported || reg == 0 {
		return 0, false
	}
	return reg - 1, true
}

// Deref returns a RuleDeref row's CFA = *(rsp + n) + k in bytes: n/8 is
// the low byte of Offset (signed), k/8 the high byte.
func (r Row) Deref() (n, k int) {
	return int(int8(r.Offset)) * 8, int(r.Offset>>8) * 8
}

// RowBytes is the size of a Row in memory and in the BPF maps.
const RowBytes = 8

// CFAOffset is the CFA's offset in bytes from rsp or rbp.
func (r Row) CFAOffset() int { return int(r.Offset) * 8 }

// RBPOffset is the offset in bytes from the CFA of the saved rbp; 0 when rbp
// is unchanged.
func (r Row) RBPOffset() int { return int(r.RBP) * 8 }

func (r Row) sameRule(o Row) bool {
	return r.Rule == o.Rule && r.RBP == o.RBP && r.Offset == o.Offset
}

// Stats describe a compiled table.
type Stats struct {
	CIEs, FDEs       int // parsed from both sections
	DebugFrameFDEs   int // .debug_frame FDEs kept (covering what .eh_frame does not)
	BadEntries       int // CIEs/FDEs skipped as invalid or unsupported
	HighFDEs         int // FDEs above 4 GiB, which a 32-bit row cannot name
	Overlaps         int // FDEs cut short by a later FDE starting inside them
	RowsBeforeDedupe int
	Rules            [RuleDeref + 1]int // rows per rule
}

// Table is the sorted unwind rows of one ELF file.
type Table struct {
	Arch  Arch
	Rows  []Row
	Loads []Load // PT_LOAD segments: where the file's addresses are mapped
	Stats Stats
}

// Load is a PT_LOAD program header.
type Load struct {
	Offset, Vaddr, FileSize uint64
}

// Bias returns what to subtract from an address of a mapping at start of the
// file at offset to get the ELF virtual address the rows use.
func (t *Table) Bias(start, offset uint64) (uint64, bool) {
	const pageMask = 4095
	// The kernel maps each PT_LOAD from its offset rounded down to a page;
	// with lld's layout (Rust) the text segment shares its first page with
	// the read-only one, so containment alone would pick the wrong one.
	for _, l := range t.Loads {
		if l.Offset&^pageMask == offset {
			return start - offset + l.Offset - l.Vaddr, true
		}
	}
	for _, l := range t.Loads {
		if l.Offset&^pageMask <= offset && offset < l.Offset+l.FileSize {
			return start - offset + l.Offset - l.Vaddr, true
		}
	}
	return 0, false
}

// Bytes is the size of the rows.
func (t *Table) Bytes() int { return len(t.Rows) * RowBytes }

// Lookup returns the row covering pc (an ELF virtual address).
func (t *Table) Lookup(pc uint64) (Row, bool) {
	if pc >= 1<<32 {
		return Row{}, false
	}
	i := sort.Search(len(t.Rows), func(i int) bool { return uint64(t.Rows[i].PC) > pc }) - 1
	if i < 0 {
		return Row{}, false
	}
	return t.Rows[i], true
}

// paddingBytes: a gap between FDEs shorter than this is the alignment
// padding between functions, never executed, so it gets no row of its own.
const paddingBytes = 16

// build turns FDEs into sorted, deduplicated rows. ehFDEs take precedence:
// a .debug_frame FDE is used only where no .eh_frame FDE covers its range.
func build(ehFDEs, debugFDEs []fde, lim Limits, st *Stats) (*Table, error) {
	sortByStart(ehFDEs)
	fdes := slices.Grow(ehFDEs, len(debugFDEs))
	for _, f := range debugFDEs {
		i := sort.Search(len(ehFDEs), func(i int) bool { return ehFDEs[i].end > f.start })
		if i < len(ehFDEs) && ehFDEs[i].start < f.end {
			continue
		}
		fdes = append(fdes, f)
		st.DebugFrameFDEs++
	}
	if len(fdes) > len(ehFDEs) {
		slices.SortStableFunc(fdes, func(a, b fde) int { return cmp.Compare(a.start, b.start) })
	}

	scratch := rowScratch.Get().(*[]Row)
	rows := (*scratch)[:0]
	if cap(rows) < len(fdes)*8 {
		rows = make([]Row, 0, len(fdes)*8)
	}
	defer func() {
		if cap(rows) <= maxScratchRows {
			*scratch = rows[:0]
			rowScratch.Put(scratch)
		}
	}()
	var prevEnd uint64
	var stack []frameState
	emit := func(r Row) error {
		st.RowsBeforeDedupe++
		// A later row at the same address replaces the earlier one.
		for len(rows) > 0 && rows[len(rows)-1].PC >= r.PC {
			rows = rows[:len(rows)-1]
		}
		if len(rows) > 0 && rows[len(rows)-1].sameRule(r) {
			return nil
		}
		if len(rows) >= lim.MaxRows {
			return errRowLimit
		}
		rows = append(rows, r)
		return nil
	}
	for i := range fdes {
		f := &fdes[i]
		if f.end > 1<<32 {
			st.HighFDEs++
			continue
		}
		if len(rows) > 0 && f.start < prevEnd {
			st.Overlaps++
		} else if len(rows) > 0 && f.start >= prevEnd+paddingBytes {
			if err := emit(Row{PC: uint32(prevEnd), Rule: RuleNone}); err != nil {
				return nil, fmt.Errorf("%w: more than %d unwind rows", ErrTooLarge, lim.MaxRows)
			}
		}
		if err := runFDE(f, lim, &stack, emit); err != nil {
			if errors.Is(err, errRowLimit) {
				return nil, fmt.Errorf("%w: more than %d unwind rows", ErrTooLarge, lim.MaxRows)
			}
			// Rows from before the bad instruction may be wrong too.
			st.BadEntries++
			if err := emit(Row{PC: uint32(f.start), Rule: RuleUnsupported}); err != nil {
				return nil, fmt.Errorf("%w: more than %d unwind rows", ErrTooLarge, lim.MaxRows)
			}
		}
		prevEnd = f.end
	}
	if len(rows) > 0 {
		if err := emit(Row{PC: uint32(prevEnd), Rule: RuleNone}); err != nil {
			return nil, fmt.Errorf("%w: more than %d unwind rows", ErrTooLarge, lim.MaxRows)
		}
	}
	for _, r := range rows {
		st.Rules[r.Rule&ruleMask]++
	}
	return &Table{Rows: slices.Clone(rows), Stats: *st}, nil
}

// sortByStart sorts FDEs by start address. It sorts 16-byte keys, not the
// 48-byte FDEs, then moves each FDE once; slices.SortFunc's order depends on
// its comparisons alone, so FDEs of equal start end in the order a sort of
// the FDEs themselves gives.
func sortByStart(fdes []fde) {
	type key struct {
		start uint64
		from  int
	}
	keys := make([]key, len(fdes))
	for i, f := range fdes {
		keys[i] = key{f.start, i}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Compare(a.start, b.start) })
	// Follow each cycle of the permutation: fdes[i] takes fdes[keys[i].from].
	for i := range keys {
		if keys[i].from < 0 || keys[i].from == i {
			continue
		}
		first := fdes[i]
		j := i
		for {
			from := keys[j].from
			keys[j].from = -1
			if from == i {
				fdes[j] = first
				break
			}
			fdes[j] = fdes[from]
			j = from
		}
	}
}

// rowScratch holds the rows of a table while build deduplicates them, reused
// by every compile: a table then costs one allocation of its exact size
// instead of a chain of growing ones, and no garbage for the collector.
// Buffers above maxScratchRows (16 MiB) are left to it.
var rowScratch = sync.Pool{New: func() any { return new([]Row) }}

const maxScratchRows = 2 << 20
