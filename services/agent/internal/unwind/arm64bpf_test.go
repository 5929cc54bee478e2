package unwind

import (
	"errors"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// walkIn and walkOut are struct walk_in and walk_out of
// testdata/arm64walk.bpf.c.
type walkIn struct {
	PC, SP, FP, LR uint64
	PID, Pad       uint32
}

type walkOut struct {
	Len, Done uint64
	Frames    [128]uint64 // UNWIND_MAX_FRAMES
}

// lpmKey and lpmValue are struct unwind_mapping_key and unwind_mapping.
type lpmKey struct {
	Prefixlen, PID uint32
	Addr           uint64
}

type lpmValue struct {
	Bias           uint64
	FirstRow, Rows uint32
}

// buildArm64Walk compiles testdata/arm64walk.bpf.c for arm64, as bpf2go
// does profile.bpf.c (bpf/profiler/gen.go).
func buildArm64Walk(t *testing.T) *ebpf.CollectionSpec {
	t.Helper()
	clang := needTool(t, "clang")
	if _, err := os.Stat(filepath.Join(arm64Sysroot, "include/asm/types.h")); err != nil {
		needTool(t, arm64CC)
		t.Fatalf("arm64 UAPI headers (linux-libc-dev-arm64-cross): %v", err)
	}
	obj := filepath.Join(t.TempDir(), "arm64walk.o")
	profiler, err := filepath.Abs("../../../../bpf/profiler")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(clang, "-O2", "-g", "-Wall", "-Werror", "-target", "bpfel", "-D__TARGET_ARCH_arm64",
		"-I"+arm64Sysroot+"/include", "-I"+profiler, "-c", "testdata/arm64walk.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	for name := range spec.Programs {
		if name != "walk_test" {
			delete(spec.Programs, name) // perf_event's context is arm64's
		}
	}
	return spec
}

// bpfWalk runs the BPF walk over snap with the tables of images: the stack
// copy is mapped at its own address in this process, where the test run's
// bpf_probe_read_user reads it.
func bpfWalk(t *testing.T, spec *ebpf.CollectionSpec, snap *arm64Snapshot, images []arm64Image) walkOut {
	t.Helper()
	spec = spec.Copy()
	total := 0
	for _, im := range images {
		total += len(im.tab.Rows)
	}
	spec.Maps["unwind_rows"].MaxEntries = uint32(total)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load: %+v", ve)
		}
		t.Fatalf("load: %v", err)
	}
	defer coll.Close()
	const pid = 4242
	first := uint32(0)
	for _, im := range images {
		for i, r := range im.tab.Rows {
			if err := coll.Maps["unwind_rows"].Put(first+uint32(i), r); err != nil {
				t.Fatal(err)
			}
		}
		for start := im.start; start < im.limit; {
			size := start & -start
			for size > im.limit-start {
				size >>= 1
			}
			key := lpmKey{Prefixlen: uint32(32 + 64 - bits.TrailingZeros64(size)), PID: bits.ReverseBytes32(pid), Addr: bits.ReverseBytes64(start)}
			if err := coll.Maps["unwind_mappings"].Put(key, lpmValue{Bias: im.bias, FirstRow: first, Rows: uint32(len(im.tab.Rows))}); err != nil {
				t.Fatal(err)
			}
			start += size
		}
		first += uint32(len(im.tab.Rows))
	}
	in := walkIn{PC: snap.regs.pc, SP: snap.regs.sp, FP: snap.regs.fp, LR: snap.regs.lr, PID: pid}
	if err := coll.Maps["walk_input"].Put(uint32(0), in); err != nil {
		t.Fatal(err)
	}

	page := uint64(os.Getpagesize())
	lo := snap.base &^ (page - 1)
	n := (snap.base + uint64(len(snap.stack)) - lo + page - 1) &^ (page - 1)
	mem, err := unix.MmapPtr(-1, 0, unsafe.Add(nil, lo), uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		t.Fatalf("map the stack copy at %#x: %v", lo, err)
	}
	defer unix.MunmapPtr(mem, uintptr(n))
	if uint64(uintptr(mem)) != lo {
		t.Fatalf("stack copy mapped at %p, not %#x", mem, lo)
	}
	copy(unsafe.Slice((*byte)(mem), n)[snap.base-lo:], snap.stack)

	if _, err := coll.Programs["walk_test"].Run(&ebpf.RunOptions{}); err != nil {
		t.Fatalf("run: %v", err)
	}
	var out walkOut
	if err := coll.Maps["walk_output"].Lookup(uint32(0), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArm64BPFWalk runs the BPF program's arm64 walk (arm64_step) itself,
// built for arm64 and run in this x86-64 kernel with BPF_PROG_TEST_RUN, over
// the stacks TestArm64WalkSnapshot and TestArm64WalkSnapshotGo copy under
// qemu, with the same tables: the same frames as the Go walk, to the same
// end. Needs root (CI runs as root).
func TestArm64BPFWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("loading BPF programs needs root")
		}
		t.Skip("loading BPF programs needs root")
	}
	spec := buildArm64Walk(t)
	type snapshot struct {
		snap   *arm64Snapshot
		images []arm64Image
	}
	cases := map[string]func(t *testing.T) snapshot{}
	for _, c := range []struct {
		name, mode string
		flags      []string
	}{
		{"O2-omit-frame-pointer", "plain", []string{"-O2", "-fomit-frame-pointer"}},
		{"O2-pac-ret", "plain", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"}},
		{"O0-frame-pointer", "plain", []string{"-O0", "-fno-omit-frame-pointer"}},
		{"signal-pac-ret", "signal", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"}},
		{"qsort", "qsort", []string{"-O2"}},
		{"qsort-libc-frame-pointers", "qsort", []string{"-O2"}},
	} {
		cases[c.name] = func(t *testing.T) snapshot {
			snap, _ := runArm64Snap(t, c.mode, c.flags...)
			images := loadArm64Images(t, snap.maps)
			if strings.HasSuffix(c.name, "frame-pointers") {
				dropTable(t, images, "libc.so.6")
			}
			return snapshot{snap, images}
		}
	}
	cases["go-gopclntab"] = func(t *testing.T) snapshot {
		snap, stripped := arm64GoSnapshot(t)
		images := loadArm64Images(t, snap.maps)
		images[0].tab = compileArm64File(t, stripped)
		return snapshot{snap, images}
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			s := setup(t)
			rows := func(pc uint64) (Row, bool) {
				im := findImage(s.images, pc)
				if im == nil {
					return Row{}, false
				}
				return im.tab.Lookup(pc - im.bias)
			}
			want, end, err := walkArm64(s.snap.regs, s.snap.mem, rows, 128)
			if err != nil || !end {
				t.Fatalf("Go walk: %d frames, end %v: %v", len(want), end, err)
			}
			got := bpfWalk(t, spec, s.snap, s.images)
			if int(got.Len) != len(want) {
				t.Errorf("BPF walk: %d frames, Go walk %d", got.Len, len(want))
			}
			for i := 0; i < len(want) && i < int(got.Len); i++ {
				if got.Frames[i] != want[i].pc {
					t.Errorf("frame %d: BPF %#x, Go %#x (%v)", i, got.Frames[i], want[i].pc, want[i].row)
				}
			}
			// The walk ends at _start or goexit (RULE_END), not on a read
			// error or an unsupported row.
			if got.Done != 1 {
				t.Errorf("BPF walk did not reach the end of the stack: done %d", got.Done)
			}
			t.Logf("BPF walk: %d frames, %#x to %#x; Go walk: %d frames", got.Len, got.Frames[0], got.Frames[max(got.Len, 1)-1], len(want))
		})
	}
}
