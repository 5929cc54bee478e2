package sampler

import (
	"bufio"
	"debug/elf"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// Programs with a known call chain, built with -O2 -fomit-frame-pointer: a
// frame-pointer walk loses every caller of a function that sets up no frame.
const chainC = `
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	return x;
}
__attribute__((noinline, noipa)) unsigned long b(unsigned long n) {
	unsigned long buf[64];
	for (int i = 0; i < 64; i++) buf[i] = leaf(n + i);
	return buf[n % 64] + 1;
}
__attribute__((noinline, noipa)) unsigned long a(unsigned long n) { return b(n) * 3 + 1; }
int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
	for (;;) sink += a(n);
}
`

const recursionC = `
volatile unsigned long sink;
__attribute__((noinline)) void spin(void) { for (;;) sink++; }
__attribute__((noinline, noipa)) unsigned long rec(int n) {
	volatile char buf[24];
	buf[n % 24] = (char)n;
	if (n == 0) spin();
	unsigned long r = rec(n - 1);
	sink += buf[n % 24];
	return r + 1;
}
int main(void) { return (int)rec(110); }
`

// The handler never returns: samples land in handler_leaf, called by the
// handler, entered through libc's __restore_rt while interrupted() ran.
const signalC = `
#include <signal.h>
#include <sys/time.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) void handler_leaf(void) { for (;;) sink++; }
__attribute__((noinline, noipa)) void on_alarm(int sig) { handler_leaf(); sink += sig; }
__attribute__((noinline, noipa)) void interrupted(void) { for (;;) sink += 2; }
int main(void) {
	struct itimerval it = { .it_value = { .tv_usec = 20000 } };
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, 0);
	interrupted();
	return 0;
}
`

func buildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	if len(flags) == 0 {
		flags = []string{"-O2", "-fomit-frame-pointer"}
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", append(flags, "-o", bin, c)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// symbolizer names the addresses of one process by its maps and the symbol
// tables (static, then dynamic) of its files.
type symbolizer struct {
	maps []mapLine
	syms map[string][]symbol
}

type mapLine struct {
	start, limit, offset uint64
	path                 string
}

type symbol struct {
	addr, size uint64
	name       string
}

func newSymbolizer(t testing.TB, pid int) *symbolizer {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &symbolizer{syms: map[string][]symbol{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || !strings.HasPrefix(fl[5], "/") {
			continue
		}
		lo, hi, _ := strings.Cut(fl[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		limit, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(fl[2], 16, 64)
		s.maps = append(s.maps, mapLine{start, limit, off, fl[5]})
	}
	return s
}

func (s *symbolizer) symbols(path string) []symbol {
	if syms, ok := s.syms[path]; ok {
		return syms
	}
	var syms []symbol
	if f, err := elf.Open(path); err == nil {
		st, _ := f.Symbols()
		dy, _ := f.DynamicSymbols()
		for _, sym := range append(st, dy...) {
			if elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Value != 0 {
				syms = append(syms, symbol{sym.Value, sym.Size, sym.Name})
			}
		}
		f.Close()
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	s.syms[path] = syms
	return syms
}

// name returns "base:function" (or "base:?"), "?" outside every file.
func (s *symbolizer) name(addr uint64) string {
	for _, m := range s.maps {
		if addr < m.start || addr >= m.limit {
			continue
		}
		f, err := elf.Open(m.path)
		if err != nil {
			return filepath.Base(m.path) + ":?"
		}
		var vaddr uint64
		found := false
		entry := f.Entry
		off := addr - m.start + m.offset
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Off <= off && off < p.Off+p.Filesz {
				vaddr, found = off-p.Off+p.Vaddr, true
				break
			}
		}
		f.Close()
		if !found {
			return filepath.Base(m.path) + ":?"
		}
		syms := s.symbols(m.path)
		i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > vaddr }) - 1
		if i >= 0 && (syms[i].size == 0 || vaddr < syms[i].addr+syms[i].size) {
			return filepath.Base(m.path) + ":" + syms[i].name
		}
		// A stripped executable's _start has no symbol: it is the entry
		// point, a few instructions long.
		if vaddr >= entry && vaddr < entry+64 {
			return filepath.Base(m.path) + ":_start"
		}
		return filepath.Base(m.path) + ":?"
	}
	return "?"
}

// unwindRun samples cmd with tables loaded for it and returns its samples
// as symbolized stacks, outermost frame last, and the counters of the same
// window.
func unwindRun(t testing.TB, cmd *exec.Cmd, d time.Duration) ([][]string, []uint64, Counters, unwind.RegistryStats) {
	t.Helper()
	return sampleRun(t, cmd, d, true)
}

// sampleRun is unwindRun; tables false leaves the process unregistered: the
// kernel's frame-pointer walk.
func sampleRun(t testing.TB, cmd *exec.Cmd, d time.Duration, tables bool) ([][]string, []uint64, Counters, unwind.RegistryStats) {
	t.Helper()
	testenv.Root(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(log, Config{Frequency: 199, CountsSize: 4096, StacksSize: 4096,
		UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	// Let the dynamic loader map the libraries.
	time.Sleep(100 * time.Millisecond)
	fs := proc.FS{Root: "/proc"}
	reg := unwind.NewRegistry(log, fs, s, unwind.DefaultLimits)
	if tables {
		if err := reg.AddProcess(pid); err != nil {
			t.Fatal(err)
		}
	}
	// As the agent does every interval: register again what the BPF program
	// marked stale (an exec, a library loaded since).
	poll := func() {
		for _, st := range s.Refresh() {
			if st.PID == pid && tables {
				if err := reg.AddProcess(pid); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Left out, samples and counters alike: the program's start. Under load
	// its start takes seconds, not the 0.4 s waited, and CPython's (imports
	// nested in C, 130 native frames and more) gives truncated walks: so
	// until it has run startCPUTicks on a CPU too.
	warm := time.Now().Add(300 * time.Millisecond)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(warm) || cpuTicks(t, pid) < startCPUTicks; {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d ran %d clock ticks in a minute, want %d: its start is not over", pid, cpuTicks(t, pid), startCPUTicks)
		}
		poll()
		time.Sleep(50 * time.Millisecond)
	}
	if _, _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	before, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// 50 samples a second of d at 199 Hz.
	sampleWindow(t, d, d/4, poll, pid)
	samples, _, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	sym := newSymbolizer(t, pid)
	var stacks [][]string
	var counts []uint64
	for _, smp := range samples {
		if smp.PID != pid {
			continue
		}
		var st []string
		for i, pc := range smp.User {
			// A return address follows its call, which may end a function.
			if i > 0 {
				pc--
			}
			st = append(st, sym.name(pc))
		}
		stacks = append(stacks, st)
		counts = append(counts, smp.Count)
	}
	stats := reg.Stats()
	reg.RemoveProcess(pid)
	if n := s.MappingEntries(); n != 0 {
		t.Errorf("%d mapping entries left after RemoveProcess", n)
	}
	return stacks, counts, countedSince(before, after), stats
}

// cpuTicks returns the CPU time pid has run, in clock ticks (USER_HZ: 100 a
// second): its samples are as many as that time allows.
func cpuTicks(t testing.TB, pid int) uint64 {
	st, err := proc.FS{Root: "/proc"}.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.UTime + st.STime
}

// sampleWindow calls poll every 50 ms for d and, under load, until each of
// pids has run cpu in it, 30 s more at most: a test's floor of samples then
// fails on what it checks, not on the load.
func sampleWindow(t testing.TB, d, cpu time.Duration, poll func(), pids ...int) {
	t.Helper()
	want := uint64(cpu / (10 * time.Millisecond))
	from := make([]uint64, len(pids))
	for i, pid := range pids {
		from[i] = cpuTicks(t, pid)
	}
	short := func() bool {
		for i, pid := range pids {
			if cpuTicks(t, pid)-from[i] < want {
				return true
			}
		}
		return false
	}
	end, limit := time.Now().Add(d), time.Now().Add(d+30*time.Second)
	for time.Now().Before(end) || (short() && time.Now().Before(limit)) {
		poll()
		time.Sleep(50 * time.Millisecond)
	}
}

// startCPUTicks is the CPU time (clock ticks, USER_HZ: 100 a second) a
// program runs before sampleRun's window: CPython's start takes 40-60 ms.
const startCPUTicks = 20

// countedSince returns the counters counted from before to after: the
// counters of a window, whose samples one Drain returned. Its edges are
// off by the walks of a Drain's few milliseconds.
func countedSince(before, after Counters) Counters {
	a, b := reflect.ValueOf(&after).Elem(), reflect.ValueOf(before)
	for i := range a.NumField() {
		a.Field(i).SetUint(a.Field(i).Uint() - b.Field(i).Uint())
	}
	return after
}

// complete reports whether a stack reaches a thread's root.
func complete(st []string) bool {
	if len(st) == 0 {
		return false
	}
	last := st[len(st)-1]
	return strings.HasSuffix(last, ":_start") || strings.HasSuffix(last, ":clone3") || strings.HasSuffix(last, ":start_thread")
}

func summarize(stacks [][]string, counts []uint64) (completeShare float64, medianDepth int, total uint64) {
	var done uint64
	var depths []int
	for i, st := range stacks {
		total += counts[i]
		if complete(st) {
			done += counts[i]
		}
		for range counts[i] {
			depths = append(depths, len(st))
		}
	}
	sort.Ints(depths)
	if total == 0 {
		return 0, 0, 0
	}
	return float64(done) / float64(total), depths[len(depths)/2], total
}

// TestUnwindKnownChain: every sample of leaf has its whole chain from _start,
// which frame pointers cannot give at -O2 -fomit-frame-pointer.
func TestUnwindKnownChain(t *testing.T) {
	t.Run("tables", func(t *testing.T) {
		c := knownChain(t, buildC(t, chainC))
		if c.UnwindFPFrames != 0 {
			t.Errorf("%d frames stepped with frame pointers", c.UnwindFPFrames)
		}
	})
	// The program's own functions have no CFI, only frame pointers: they are
	// stepped with rbp, libc and _start with tables. At -O0, because GCC
	// sets up no frame in leaf at -O2 even with -fno-omit-frame-pointer (a
	// frame-pointer walk would lose b).
	t.Run("frame-pointer fallback", func(t *testing.T) {
		c := knownChain(t, buildC(t, chainC, "-O0", "-fno-omit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"))
		if c.UnwindNoRow == 0 || c.UnwindFPFrames == 0 {
			t.Errorf("counters %+v: no frame-pointer step", c)
		}
	})
}

func knownChain(t *testing.T, bin string) Counters {
	stacks, counts, c, stats := unwindRun(t, exec.Command(bin, "5000"), 2*time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v; registry %+v", total, 100*share, depth, c, stats)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	exact := exactChain(t, stacks, counts, total)
	if exact*100 < total*99 {
		t.Fatalf("%d of %d samples have leaf <- b <- a <- main <- libc <- _start", exact, total)
	}
	if c.UnwindStacks == 0 || c.UnwindComplete == 0 {
		t.Fatalf("counters %+v: no table walk", c)
	}
	return c
}

// exactChain counts the samples of chainC whose stack is leaf <- b <- a <-
// main <- libc <- _start, and reports the stacks (over 1% of total) that are
// not.
func exactChain(t testing.TB, stacks [][]string, counts []uint64, total uint64) uint64 {
	t.Helper()
	want := []string{"prog:leaf", "prog:b", "prog:a", "prog:main"}
	var exact uint64
	for i, st := range stacks {
		// The innermost frame is leaf, or b between two calls of leaf.
		s := st
		if len(s) > 0 && s[0] == "prog:b" {
			s = append([]string{"prog:leaf"}, s...)
		}
		if len(s) >= 6 && strings.Join(s[:4], " ") == strings.Join(want, " ") && complete(s) {
			mid := s[4 : len(s)-1]
			libc := len(mid) > 0
			for _, f := range mid {
				libc = libc && strings.HasPrefix(f, "libc.so.6:")
			}
			if libc && s[len(s)-1] == "prog:_start" {
				exact += counts[i]
				continue
			}
		}
		if counts[i]*100 > total {
			t.Errorf("%d samples: %s", counts[i], strings.Join(st, " <- "))
		}
	}
	return exact
}

// TestUnwindDeepRecursion: 110 frames of rec between spin and main.
func TestUnwindDeepRecursion(t *testing.T) {
	bin := buildC(t, recursionC)
	stacks, counts, c, _ := unwindRun(t, exec.Command(bin), time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v", total, 100*share, depth, c)
	if total < 20 {
		t.Fatalf("only %d samples", total)
	}
	for i, st := range stacks {
		recs := 0
		for _, f := range st {
			if f == "prog:rec" {
				recs++
			}
		}
		if recs != 111 || st[0] != "prog:spin" || st[112] != "prog:main" || !complete(st) {
			if len(st) > 8 {
				st = append(st[:4:4], append([]string{"..."}, st[len(st)-4:]...)...)
			}
			t.Errorf("%d samples: %d rec frames, %d frames: %s", counts[i], recs, len(stacks[i]), strings.Join(st, " <- "))
		}
	}
}

// TestUnwindXZ: Debian's xz, built without frame pointers, through liblzma.
func TestUnwindXZ(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in")
	var data []byte
	for _, p := range []string{"/usr/bin/xz", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	for len(data) < 64<<20 {
		data = append(data, data...)
	}
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "exec xz -9e -T1 -c "+in+" > /dev/null")
	stacks, counts, c, stats := unwindRun(t, cmd, 3*time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v; registry %+v", total, 100*share, depth, c, stats)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	for i, st := range stacks {
		if !complete(st) && counts[i]*50 > total {
			t.Errorf("%d samples incomplete: %s", counts[i], strings.Join(st, " <- "))
		}
	}
	if share < 0.99 {
		t.Fatalf("%.1f%% of samples complete, want 99%%", 100*share)
	}
}

// TestUnwindSignalFrame: through the kernel's signal frame into the
// interrupted function and on to _start.
func TestUnwindSignalFrame(t *testing.T) {
	bin := buildC(t, signalC)
	stacks, counts, c, _ := unwindRun(t, exec.Command(bin), time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v", total, 100*share, depth, c)
	if total < 20 {
		t.Fatalf("only %d samples", total)
	}
	var exact uint64
	for i, st := range stacks {
		if len(st) >= 7 && st[0] == "prog:handler_leaf" && st[1] == "prog:on_alarm" &&
			strings.HasPrefix(st[2], "libc.so.6:") && st[3] == "prog:interrupted" && st[4] == "prog:main" && complete(st) {
			exact += counts[i]
			continue
		}
		t.Errorf("%d samples: %s", counts[i], strings.Join(st, " <- "))
	}
	if exact*100 < total*99 {
		t.Fatalf("%d of %d samples have handler_leaf <- on_alarm <- __restore_rt <- interrupted <- main ... _start", exact, total)
	}
	if c.UnwindSignal == 0 {
		t.Fatalf("counters %+v: no signal frame", c)
	}
}

// vdsoC spends its time in clock_gettime, in the vDSO: no file maps it, its
// table comes from the agent's own copy.
const vdsoC = `
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) void tick(void) {
	struct timespec ts;
	for (int i = 0; i < 1000; i++) { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
}
int main(void) { for (;;) tick(); }
`

// TestUnwindVDSO: samples in the vDSO reach _start through tick and main,
// with no frame-pointer step.
func TestUnwindVDSO(t *testing.T) {
	bin := buildC(t, vdsoC)
	stacks, counts, c, stats := unwindRun(t, exec.Command(bin), 2*time.Second)
	share, depth, total := summarize(stacks, counts)
	t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v; registry %+v", total, 100*share, depth, c, stats)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	var inVDSO, exact uint64
	for i, st := range stacks {
		if len(st) == 0 || st[0] != "?" {
			continue // in tick or libc's clock_gettime
		}
		inVDSO += counts[i]
		for j, f := range st {
			if f == "prog:tick" {
				if j+1 < len(st) && st[j+1] == "prog:main" && complete(st) {
					exact += counts[i]
				}
				break
			}
		}
	}
	if inVDSO*2 < total {
		t.Fatalf("%d of %d samples in the vDSO", inVDSO, total)
	}
	if exact*100 < inVDSO*99 {
		t.Fatalf("%d of %d vDSO samples reach _start through tick and main", exact, inVDSO)
	}
	if c.UnwindFPFrames != 0 {
		t.Errorf("%d frame-pointer steps: the vDSO had no table", c.UnwindFPFrames)
	}
}
