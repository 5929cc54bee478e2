package sampler

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/bpf/profiler"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// blockerC sleeps in two known chains and prints how long each slept by its
// own clock: many short sleeps (short_blocker <- short_worker <- main) and a
// few long ones that outlast the test's drains (long_blocker <- long_worker
// <- main). It starts at a byte on stdin (once its tables are registered)
// and waits in pause() at the end, so its maps can still be read.
const blockerC = `
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
__attribute__((noinline, noipa)) long long short_blocker(void) {
	struct timespec d = { 0, 2500000 };
	long long t0 = now(); nanosleep(&d, 0); return now() - t0;
}
__attribute__((noinline, noipa)) long long short_worker(int n) { long long s = 0; for (int i = 0; i < n; i++) s += short_blocker(); return s; }
__attribute__((noinline, noipa)) long long long_blocker(void) {
	struct timespec d = { 0, 250000000 };
	long long t0 = now(); nanosleep(&d, 0); return now() - t0;
}
__attribute__((noinline, noipa)) long long long_worker(int n) { long long s = 0; for (int i = 0; i < n; i++) s += long_blocker(); return s; }
int main(void) {
	char c;
	if (read(0, &c, 1) != 1) return 1;
	long long s = short_worker(400);
	long long l = long_worker(4);
	printf("%lld %lld\n", s, l);
	fflush(stdout);
	pause();
	return 0;
}
`

// TestOffCPUKnownChains: the blocked time of each chain, from the BPF
// program through Drain, is the time the program measured itself sleeping,
// within bounds that sampling explains; the stacks are the chains (walked
// with tables: the program has no frame pointers) and the kernel's
// nanosleep. Drains every 100 ms: the long sleeps span several flips, so
// their stacks must outlive the drain of the generation they started in.
func TestOffCPUKnownChains(t *testing.T) {
	for _, tc := range []struct {
		probability float64
		tolerance   float64 // of the short chain's total; the long one is exact at probability 1
	}{
		{1, 0.1},
		// 400 short sleeps, 100 recorded on average: a standard deviation
		// of 8.7% of the estimate; 0.4 is 4.6 of them.
		{0.25, 0.4},
	} {
		t.Run(fmt.Sprintf("probability %v", tc.probability), func(t *testing.T) {
			offCPUChains(t, tc.probability, tc.tolerance)
		})
	}
}

func offCPUChains(t *testing.T, probability, tolerance float64) {
	testenv.Root(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Every thread of the host is recorded: stack maps of the agent's
	// default size keep bucket collisions (a block without its stack) rare.
	s, err := New(log, Config{Frequency: 19, CountsSize: 16384, StacksSize: 16384,
		UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64,
		OffCPU: OffCPU{Probability: probability, Threads: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command(buildC(t, blockerC))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	time.Sleep(100 * time.Millisecond)
	reg := unwind.NewRegistry(log, proc.FS{Root: "/proc"}, s, unwind.DefaultLimits)
	if err := reg.AddProcess(pid); err != nil {
		t.Fatal(err)
	}
	defer reg.RemoveProcess(pid)
	if _, err := stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	var samples []Sample
	drain := func() {
		if _, _, err := s.Drain(); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s.OffCPUSamples()...)
	}
	var measured string
	deadline := time.After(30 * time.Second)
	for measured == "" {
		select {
		case measured = <-line:
		case <-time.After(100 * time.Millisecond):
			drain()
		case <-deadline:
			t.Fatal("the blocker did not finish")
		}
	}
	// The last blocks ended before the program printed.
	drain()
	var shortNs, longNs float64
	if _, err := fmt.Sscan(measured, &shortNs, &longNs); err != nil {
		t.Fatalf("blocker printed %q: %v", measured, err)
	}

	sym := newSymbolizer(t, pid)
	kf, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := proc.ParseKallsyms(kf)
	kf.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got = map[string]float64{}
	var blocks, noKernel = map[string]uint64{}, map[string]uint64{}
	var inSleep, noKernelNs = map[string]float64{}, map[string]float64{}
	var other float64
	for _, smp := range samples {
		if smp.PID != pid {
			continue
		}
		var st []string
		for i, pc := range smp.User {
			if i > 0 {
				pc--
			}
			st = append(st, sym.name(pc))
		}
		// libc's nanosleep frames first.
		inProg := st
		for len(inProg) > 0 && !strings.HasPrefix(inProg[0], "prog:") {
			inProg = inProg[1:]
		}
		chain := ""
		switch {
		case inOrder(inProg, "prog:short_blocker", "prog:short_worker", "prog:main"):
			chain = "short"
		case inOrder(inProg, "prog:long_blocker", "prog:long_worker", "prog:main"):
			chain = "long"
		}
		if chain == "" {
			other += float64(smp.PeriodNanos)
			t.Logf("other stack %v: %d blocks, %d ns", st, smp.Count, smp.PeriodNanos)
			continue
		}
		if !complete(st) {
			t.Errorf("%s chain does not reach _start: %v", chain, st)
		}
		var kernel []string
		for _, pc := range smp.Kernel {
			kernel = append(kernel, ks.Resolve(pc))
		}
		// A stack map bucket taken by another stack (-EEXIST) leaves
		// the block without its kernel stack: counted, and rare. A
		// thread preempted on its way back to user space waited for a
		// CPU, not in nanosleep.
		if len(kernel) == 0 {
			noKernel[chain] += smp.Count
			noKernelNs[chain] += float64(smp.PeriodNanos)
		} else if strings.Contains(strings.Join(kernel, " "), "nanosleep") {
			inSleep[chain] += float64(smp.PeriodNanos)
		} else {
			t.Logf("%s chain: kernel stack without nanosleep: %v", chain, kernel)
		}
		got[chain] += float64(smp.PeriodNanos)
		blocks[chain] += smp.Count
	}
	c, err := s.OffCPUCounters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("short: %.0f ns measured, %.0f ns recorded in %d blocks; long: %.0f ns measured, %.0f ns in %d blocks; other stacks %.0f ns; without kernel stack %v; counters %+v",
		shortNs, got["short"], blocks["short"], longNs, got["long"], blocks["long"], other, noKernel, c)
	// nanosleep's own time on the CPU (entry, timer setup, exit) is in the
	// program's measure, not off the CPU.
	if r := got["short"] / shortNs; r < 1-tolerance || r > 1+tolerance {
		t.Errorf("short chain: %.0f ns recorded for %.0f ns slept (ratio %.3f, want 1±%.2f)", got["short"], shortNs, r, tolerance)
	}
	// 4 long blocks, each recorded or not: only every one says much.
	if probability == 1 {
		if r := got["long"] / longNs; r < 0.95 || r > 1.05 {
			t.Errorf("long chain: %.0f ns recorded for %.0f ns slept (ratio %.3f, want 1±0.05)", got["long"], longNs, r)
		}
		if blocks["long"] != 4 {
			t.Errorf("long chain: %d blocks, want 4", blocks["long"])
		}
	}
	for chain, ns := range got {
		if withKernel := ns - noKernelNs[chain]; inSleep[chain] < 0.9*withKernel {
			t.Errorf("%s chain: %.0f of %.0f ns with a kernel stack have nanosleep in it", chain, inSleep[chain], withKernel)
		}
	}
	if noKernel["short"]*10 > blocks["short"] || noKernel["long"] > 1 {
		t.Errorf("blocks without a kernel stack: %v of %v", noKernel, blocks)
	}
	if c.Recorded == 0 || c.Blocks == 0 || c.StartsFull != 0 || c.CountsFull != 0 {
		t.Errorf("counters %+v", c)
	}
}

// TestOffCPUStacksCleared: every thread of the host recorded (probability
// 1), drained every 50 ms: after each drain the drained generation keeps only
// the stacks that blocks still under way, or ended since the flip, refer to,
// so the stack maps do not silt up with the stacks of blocks that spanned a
// flip.
func TestOffCPUStacksCleared(t *testing.T) {
	testenv.Root(t)
	s, err := New(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Config{Frequency: 19, CountsSize: 4096, StacksSize: 4096, OffCPU: OffCPU{Probability: 1, Threads: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var crossed, worst int
	for i := range 40 {
		time.Sleep(50 * time.Millisecond)
		if _, _, err := s.Drain(); err != nil {
			t.Fatal(err)
		}
		s.OffCPUSamples()
		idle := s.gen ^ 1
		crossed += len(s.offDeferred[idle^1].ids)
		stacks, cur := s.objs.Stacks0, s.objs.OffcpuCounts1
		if idle == 1 {
			stacks, cur = s.objs.Stacks1, s.objs.OffcpuCounts0
		}
		// Left after the drain, then what may refer to them: read in this
		// order, a block ending in between is in cur.
		var id, tid uint32
		var frames [profiler.MaxStackDepth]uint64
		var left []uint32
		for it := stacks.Iterate(); it.Next(&id, &frames); {
			left = append(left, id)
		}
		// Read as the sampler reads them (an iteration by keys of a map
		// that changes can stop early).
		refs := map[int32]bool{}
		var st profiler.ProfileOffcpuStart
		if err := batchEach(s.objs.OffcpuStarts, &tid, &st, func() {
			if st.Key.StackGen == idle {
				refs[st.Key.Stack.KernelStackId], refs[st.Key.Stack.UserStackId] = true, true
			}
		}); err != nil {
			t.Fatal(err)
		}
		var key profiler.ProfileOffcpuKey
		var val profiler.ProfileSampleValue
		if err := batchEach(cur, &key, &val, func() {
			if key.StackGen == idle {
				refs[key.Stack.KernelStackId], refs[key.Stack.UserStackId] = true, true
			}
		}); err != nil {
			t.Fatal(err)
		}
		stray := 0
		for _, id := range left {
			if !refs[int32(id)] {
				stray++
			}
		}
		worst = max(worst, stray)
		// A program that read the generation just before the flip may
		// have added one or two.
		if stray > 6 {
			t.Fatalf("drain %d: %d of the %d stacks left in the drained generation are referred to by no block", i, stray, len(left))
		}
	}
	if crossed == 0 {
		t.Fatal("no block spanned a flip: the test did not exercise what it checks")
	}
	t.Logf("stacks of blocks that spanned a flip, summed over drains: %d; at most %d unreferenced stacks left after a drain", crossed, worst)
}
