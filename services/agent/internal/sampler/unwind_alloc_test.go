package sampler

import (
	"encoding/binary"
	"log/slog"
	"math/bits"
	"os"
	"testing"

	"github.com/stackstream/stackstream/bpf/profiler"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

func TestPrefixes(t *testing.T) {
	cases := []struct {
		name         string
		start, limit uint64
	}{
		{"one page", 0x1000, 0x2000},
		{"unaligned pages", 0x55d0c3a01000, 0x55d0c3b7e000},
		{"libc text", 0x7f4e1a828000, 0x7f4e1a9bd000},
		{"from zero", 0, 0x400000},
		{"top of the space", 0xffffffffff600000, 0xffffffffff601000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := prefixes(tc.start, tc.limit)
			next := tc.start
			for _, p := range ps {
				size := uint64(1) << (64 - p.bits)
				if p.addr != next || p.addr&(size-1) != 0 {
					t.Fatalf("prefix %#x/%d does not continue at %#x aligned", p.addr, p.bits, next)
				}
				next += size
			}
			if next != tc.limit {
				t.Fatalf("prefixes end at %#x, want %#x", next, tc.limit)
			}
			// At most two blocks per bit of the length.
			if max := 2 * bits.Len64(tc.limit-tc.start); len(ps) > max {
				t.Fatalf("%d prefixes, want at most %d", len(ps), max)
			}
		})
	}
}

func TestRowAllocator(t *testing.T) {
	a := newRowAllocator(100)
	x, _ := a.alloc(30)
	y, _ := a.alloc(30)
	z, _ := a.alloc(30)
	if x != 0 || y != 30 || z != 60 {
		t.Fatalf("allocated %d %d %d", x, y, z)
	}
	if _, ok := a.alloc(20); ok {
		t.Fatal("allocated 20 rows out of 10 free")
	}
	a.release(y, 30)
	a.release(x, 30)
	// x and y merged: 60 contiguous rows.
	if f, ok := a.alloc(60); !ok || f != 0 {
		t.Fatalf("alloc 60 after freeing two neighbours: %d %v (free %v)", f, ok, a.free)
	}
	a.release(0, 60)
	a.release(z, 30)
	if len(a.free) != 1 || a.free[0] != (rowRange{0, 100}) {
		t.Fatalf("free list %v after freeing everything", a.free)
	}
}

// TestRowLayout: unwind.Row is copied into the BPF array as struct
// unwind_row.
func TestRowLayout(t *testing.T) {
	if a, b := binary.Size(unwind.Row{}), binary.Size(profiler.ProfileUnwindRow{}); a != b || a != unwind.RowBytes {
		t.Fatalf("unwind.Row %d bytes, struct unwind_row %d, RowBytes %d", a, b, unwind.RowBytes)
	}
	for r := unwind.RuleNone; r <= unwind.RuleDeref; r++ {
		want := map[unwind.Rule]int{unwind.RuleNone: profiler.RuleNone, unwind.RuleRSP: profiler.RuleRSP, unwind.RuleRBP: profiler.RuleRBP,
			unwind.RulePLT: profiler.RulePLT, unwind.RuleEnd: profiler.RuleEnd, unwind.RuleSignal: profiler.RuleSignal, unwind.RuleUnsupported: profiler.RuleUnsupported,
			unwind.RuleDeref: profiler.RuleDeref}[r]
		if int(r) != want {
			t.Errorf("rule %v = %d, C has %d", r, r, want)
		}
	}
}

// TestLoadRows: rows written through the array's memory mapping are what
// the BPF program reads, at an offset that is not page-aligned and across
// page boundaries, and leave their neighbours alone.
func TestLoadRows(t *testing.T) {
	testenv.Root(t)
	s, err := New(slog.New(slog.NewTextHandler(os.Stderr, nil)), Config{Frequency: 19, CountsSize: 16, StacksSize: 16, UnwindTableBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mk := func(n int, seed uint32) []unwind.Row {
		rows := make([]unwind.Row, n)
		for i := range rows {
			rows[i] = unwind.Row{PC: seed + uint32(i)*16, Rule: unwind.RuleRSP, RBP: int8(i % 7), Offset: uint16(i)}
		}
		return rows
	}
	a, b := mk(3, 0x1000), mk(1500, 0x40000)
	fa, err := s.LoadRows(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := s.LoadRows(b)
	if err != nil {
		t.Fatal(err)
	}
	if fb != fa+3 {
		t.Fatalf("second table at row %d, want %d", fb, fa+3)
	}
	check := func(first uint32, rows []unwind.Row) {
		for i, want := range rows {
			var got profiler.ProfileUnwindRow
			if err := s.objs.UnwindRows.Lookup(first+uint32(i), &got); err != nil {
				t.Fatal(err)
			}
			if got.Pc != want.PC || got.Rule != uint8(want.Rule) || got.Rbp != want.RBP || got.Offset != want.Offset {
				t.Fatalf("row %d: %+v, want %+v", first+uint32(i), got, want)
			}
		}
	}
	check(fa, a)
	check(fb, b)
	if _, err := s.LoadRows(make([]unwind.Row, 64<<10/unwind.RowBytes)); err == nil {
		t.Fatal("a table larger than the room left was loaded")
	}
}
