package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// ehSection builds an .eh_frame from a CIE with the standard x86-64 initial
// instructions and FDEs with the given instructions, each covering 64 bytes.
func ehSection(fdeInstructions ...[]byte) []byte {
	var b bytes.Buffer
	entry := func(body []byte) {
		binary.Write(&b, binary.LittleEndian, uint32(len(body)))
		b.Write(body)
	}
	// CIE: id 0, version 1, "zR", code 1, data -8, ra 16, aug len 1, udata4.
	entry([]byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, peUdata4,
		cfaDefCFA, regRSP, 8, cfaOffset | regRA, 1, 0, 0})
	for i, ins := range fdeInstructions {
		body := binary.LittleEndian.AppendUint32(nil, uint32(b.Len()+4)) // back to the CIE
		body = binary.LittleEndian.AppendUint32(body, uint32(0x1000+i*64))
		body = binary.LittleEndian.AppendUint32(body, 64)
		body = append(body, 0) // augmentation data length
		body = append(body, ins...)
		entry(body)
	}
	b.Write([]byte{0, 0, 0, 0})
	return b.Bytes()
}

func compileSection(b []byte, lim Limits) (*Table, error) {
	var st Stats
	fdes, err := parseEntries(b, 0, ehFrame, ArchX86_64, lim, &st)
	if err != nil {
		return nil, err
	}
	return build(fdes, nil, lim, &st)
}

func TestCompileSection(t *testing.T) {
	push := []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | regRBP, 2,
		cfaAdvanceLoc | 3, cfaDefCFARegister, regRBP,
		cfaAdvanceLoc | 20, cfaDefCFA, regRSP, 8}
	tab, err := compileSection(ehSection(push), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{PC: 0x1000, Rule: RuleRSP, Offset: 1},
		{PC: 0x1001, Rule: RuleRSP, Offset: 2, RBP: -2},
		{PC: 0x1004, Rule: RuleRBP, Offset: 2, RBP: -2},
		{PC: 0x1018, Rule: RuleRSP, Offset: 1, RBP: -2},
		{PC: 0x1040, Rule: RuleNone},
	}
	if len(tab.Rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", tab.Rows, want)
	}
	for i := range want {
		if tab.Rows[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, tab.Rows[i], want[i])
		}
	}
}

func TestCompileHostile(t *testing.T) {
	many := make([][]byte, 100)
	lim := Limits{MaxSectionBytes: 1 << 20, MaxEntries: 50, MaxRows: 1000, MaxStateDepth: 4}
	nested := bytes.Repeat([]byte{cfaRememberState}, 5)
	rowsFlood := bytes.Repeat([]byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaAdvanceLoc | 1, cfaDefCFAOffset, 8}, 10)
	cases := []struct {
		name    string
		section []byte
		lim     Limits
		want    error // nil: compiles, the bad FDE marked unsupported
	}{
		{"too many entries", ehSection(many...), lim, ErrTooLarge},
		{"too many rows", ehSection(append(many[:40:40], rowsFlood)...), Limits{MaxSectionBytes: 1 << 20, MaxEntries: 50, MaxRows: 10, MaxStateDepth: 4}, ErrTooLarge},
		{"length past the end", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}, lim, ErrInvalid},
		{"64-bit length past the end", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}, lim, ErrInvalid},
		{"truncated length", []byte{1, 0}, lim, ErrInvalid},
		{"remember_state nested", ehSection(nested), lim, nil},
		{"restore_state unbalanced", ehSection([]byte{cfaRestoreState}), lim, nil},
		{"unknown opcode", ehSection([]byte{0x3f}), lim, nil},
		{"truncated LEB128", ehSection([]byte{cfaDefCFA, 0x80, 0x80}), lim, nil},
		{"overlong LEB128", ehSection(append([]byte{cfaDefCFAOffset}, bytes.Repeat([]byte{0xff}, 20)...)), lim, nil},
		{"expression block past the end", ehSection([]byte{cfaDefCFAExpression, 0x7f}), lim, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := compileSection(tc.section, tc.lim)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tab.Stats.BadEntries == 0 {
				t.Errorf("no bad entry counted: %+v", tab.Stats)
			}
			if r, ok := tab.Lookup(0x1000); !ok || r.Rule != RuleUnsupported {
				t.Errorf("row at 0x1000 %+v, want unsupported", r)
			}
		})
	}
}

func TestCompileELFBounds(t *testing.T) {
	b, err := os.ReadFile("/usr/bin/xz")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("truncated file", func(t *testing.T) {
		// The section headers are at the end: cut them off.
		if _, err := Compile(bytes.NewReader(b), int64(len(b))/2, DefaultLimits); !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v, want ErrInvalid", err)
		}
	})
	t.Run("section over the limit", func(t *testing.T) {
		lim := DefaultLimits
		lim.MaxSectionBytes = 1024
		if _, err := Compile(bytes.NewReader(b), int64(len(b)), lim); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error %v, want ErrTooLarge", err)
		}
	})
	t.Run("not ELF", func(t *testing.T) {
		if _, err := Compile(bytes.NewReader([]byte("#!/bin/sh\n")), 10, DefaultLimits); !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v, want ErrInvalid", err)
		}
	})
}

// FuzzCompile feeds hostile ELF files and bare .eh_frame sections; every
// error must be a sentinel and memory stay within a bound of the input.
func FuzzCompile(f *testing.F) {
	xz, err := os.ReadFile("/usr/bin/xz")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(xz)
	if arm64, err := os.ReadFile(arm64Sysroot + "/lib/libgcc_s.so.1"); err == nil {
		f.Add(arm64) // Debian's arm64 build (libgcc-s1-arm64-cross)
	}
	f.Add(ehSection([]byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16}))
	f.Add(ehSection(bytes.Repeat([]byte{cfaRememberState}, 70)))
	lim := Limits{MaxSectionBytes: 1 << 20, MaxEntries: 10_000, MaxRows: 100_000, MaxStateDepth: 16}
	// The bound: the section copy, an FDE (~64 bytes) per entry, the row
	// slice and its growth (3x), the remember stack, and debug/elf's
	// headers, with room.
	const maxAlloc = 2*(1<<20) + 10_000*96 + 3*100_000*RowBytes + 16*200 + 4<<20
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		// An input is of one machine: the other stops at its header.
		for _, arch := range []Arch{ArchX86_64, ArchArm64} {
			tab, err := compileArch(bytes.NewReader(b), int64(len(b)), arch, lim)
			if err == nil {
				checkSorted(t, tab)
			} else if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("%v: error %v is not a sentinel", arch, err)
			}
		}
		tab, err := compileSection(b, lim)
		if err == nil {
			checkSorted(t, tab)
		} else if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("section error %v is not a sentinel", err)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > maxAlloc+uint64(4*len(b)) {
			t.Fatalf("compiling %d bytes allocated %d bytes", len(b), n)
		}
	})
}

func checkSorted(t *testing.T, tab *Table) {
	t.Helper()
	for i := 1; i < len(tab.Rows); i++ {
		if tab.Rows[i].PC <= tab.Rows[i-1].PC {
			t.Fatalf("rows %d and %d out of order: %+v %+v", i-1, i, tab.Rows[i-1], tab.Rows[i])
		}
		if tab.Rows[i].sameRule(tab.Rows[i-1]) {
			t.Fatalf("rows %d and %d not deduplicated: %+v", i-1, i, tab.Rows[i])
		}
	}
}

// BenchmarkCompile compiles the tables of real binaries of this machine:
// gcc's cc1 (~430k rows) is the largest the agent meets under a build's
// process churn, libcrypto has perlasm's expression rows.
func BenchmarkCompile(b *testing.B) {
	for _, path := range []string{
		"/usr/bin/xz",
		"/lib/x86_64-linux-gnu/libc.so.6",
		python3Path(b),
		"/lib/x86_64-linux-gnu/libcrypto.so.3",
		cc1Path(b),
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.ReportAllocs()
			var tab *Table
			cpu0 := cpuTime(b)
			for b.Loop() {
				if tab, err = Compile(bytes.NewReader(data), int64(len(data)), DefaultLimits); err != nil {
					b.Fatal(err)
				}
			}
			// Wall time counts the waits of a shared machine; the process's
			// CPU time (the GC's included) is what the agent pays.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(tab.Rows)), "rows")
			b.ReportMetric(float64(tab.Bytes()), "table-bytes")
			b.ReportMetric(float64(tab.Stats.FDEs), "fdes")
		})
	}
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
