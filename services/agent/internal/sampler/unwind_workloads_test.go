package sampler

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// inOrder reports whether want appear in st in that order, each frame
// containing its string, the first at st[0].
func inOrder(st []string, want ...string) bool {
	i := 0
	for _, f := range st {
		if i < len(want) && strings.Contains(f, want[i]) {
			i++
		} else if i == 0 {
			return false
		}
	}
	return i == len(want)
}

func buildWith(t testing.TB, compiler, ext, src string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(compiler); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v", compiler, err)
		}
		t.Skipf("%s: %v", compiler, err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "prog."+ext)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command(compiler, append(flags, "-o", bin, file)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", compiler, err, out)
	}
	return bin
}

const goSchedSource = `package main

import "runtime"

var sink uint64

func main() {
	for i := 0; i < 4; i++ {
		go func() {
			for {
				sink++
				runtime.Gosched()
			}
		}()
	}
	for {
		runtime.Gosched()
	}
}
`

const cxxSource = `
#include <stdexcept>
volatile unsigned long sink;
__attribute__((noinline, noipa)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	if (x == 42) throw std::runtime_error("unlikely");
	return x;
}
__attribute__((noinline, noipa)) unsigned long guarded(unsigned long n) {
	try { return leaf(n); } catch (const std::exception &) { return 0; }
}
int main() { for (;;) sink += guarded(100000); }
`

const rustSource = `
#[inline(never)] fn leaf(n: u64) -> u64 { let mut x = n; for i in 0..n { x = x.wrapping_mul(6364136223846793005).wrapping_add(i); } std::hint::black_box(x) }
#[inline(never)] fn middle(n: u64) -> u64 { let v: Vec<u64> = (0..8).map(|i| leaf(std::hint::black_box(n + i))).collect(); v[(n % 8) as usize] + 1 }
fn main() { let mut s = 0u64; loop { s = s.wrapping_add(middle(std::hint::black_box(100000))); if s == 42 { println!("{}", s); } } }
`

const threadsC = `
#include <pthread.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) void worker_leaf(void) { for (;;) sink++; }
__attribute__((noinline, noipa)) void *worker(void *arg) { worker_leaf(); return arg; }
int main(void) {
	pthread_t t[3];
	for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, 0);
	pthread_join(t[0], 0);
	return 0;
}
`

// TestUnwindWorkloads: programs built here and Debian's own binaries, none
// with frame pointers; each sample's stack must reach a thread's root
// (_start, or libc's clone3 for threads: the walk ends on its undefined
// return address), and the known chains must be exact.
func TestUnwindWorkloads(t *testing.T) {
	cases := []struct {
		name  string
		cmd   func(t *testing.T) *exec.Cmd
		chain []string // innermost first, as substrings of symbolized frames
		// rootless: thread stacks end in libc (clone3 has no exported
		// symbol): completeness from the BPF counters instead.
		rootless bool
	}{
		{"c++ with exceptions -O2", func(t *testing.T) *exec.Cmd {
			return exec.Command(buildWith(t, "g++", "cc", cxxSource, "-O2", "-fomit-frame-pointer"))
		}, []string{"prog:_Z4leafm", "prog:_Z7guardedm", "prog:main"}, false},
		{"c -O3 with debug info", func(t *testing.T) *exec.Cmd {
			return exec.Command(buildWith(t, "gcc", "c", chainC, "-O3", "-g", "-fomit-frame-pointer"), "5000")
		}, []string{"prog:leaf", "prog:b", "prog:a", "prog:main"}, false},
		{"rust release", func(t *testing.T) *exec.Cmd {
			return exec.Command(buildWith(t, "rustc", "rs", rustSource, "-C", "opt-level=3"))
		}, []string{"4prog4leaf", "4prog6middle", "4prog4main"}, false},
		{"threads", func(t *testing.T) *exec.Cmd {
			return exec.Command(buildWith(t, "gcc", "c", threadsC, "-O2", "-fomit-frame-pointer", "-pthread"))
		}, []string{"prog:worker_leaf", "prog:worker", "libc.so.6:"}, true},
		{"go", func(t *testing.T) *exec.Cmd {
			return exec.Command(workload.BuildGo(t, t.TempDir(), "prog", false))
		}, []string{"prog:main.hotFunction", "prog:main.main", "prog:runtime.main", "prog:runtime.goexit"}, true},
		// No CFI and no symbols: rows from .gopclntab, so the frameless
		// hotFunction keeps main.main (frame pointers alone lose it: median
		// depth 3). Unnamed frames: the depth says it.
		{"go stripped", func(t *testing.T) *exec.Cmd {
			return exec.Command(workload.BuildGo(t, t.TempDir(), "prog", true))
		}, nil, true},
		// Goroutines that yield: most samples are the scheduler on g0,
		// under runtime.mcall, which ends their stacks (walked on, the
		// return address is a stale word of g0's stack).
		{"go scheduler", func(t *testing.T) *exec.Cmd {
			return exec.Command(buildWith(t, "go", "go", goSchedSource, "build"))
		}, nil, true},
		// Debian's, by its path: "python3" may be a version manager's
		// shim, a chain of bash scripts that execs another Python.
		{"python3", func(t *testing.T) *exec.Cmd {
			return exec.Command("/usr/bin/python3", "-c", "while True: sum(i * i for i in range(1000))")
		}, nil, false},
		{"openssl speed sha256", func(t *testing.T) *exec.Cmd {
			return exec.Command("openssl", "speed", "-seconds", "10", "sha256")
		}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stacks, counts, c, stats := unwindRun(t, tc.cmd(t), 2*time.Second)
			share, depth, total := summarize(stacks, counts)
			t.Logf("%d samples, %.1f%% complete, median depth %d; counters %+v; registry %+v", total, 100*share, depth, c, stats)
			if total < 50 {
				t.Fatalf("only %d samples", total)
			}
			// Samples in the hot leaf must have its whole chain; the others
			// (a runtime's own threads) only reach a root.
			var exact, hot uint64
			for i, st := range stacks {
				ok := tc.rootless || complete(st)
				if tc.chain != nil && len(st) > 0 && strings.Contains(st[0], tc.chain[0]) {
					hot += counts[i]
					ok = ok && inOrder(st, tc.chain...)
				}
				if ok {
					exact += counts[i]
				} else if counts[i]*50 > total {
					t.Errorf("%d samples: %s", counts[i], strings.Join(st, " <- "))
				}
			}
			if exact*100 < total*99 {
				t.Errorf("%d of %d samples complete (with the known chain from %v)", exact, total, tc.chain)
			}
			if tc.chain != nil && hot*2 < total {
				t.Errorf("%d of %d samples in %s", hot, total, tc.chain[0])
			}
			if tc.name == "go stripped" && (depth < 4 || c.UnwindFPFrames*100 > c.UnwindStacks) {
				t.Errorf("median depth %d (want hotFunction <- main.main <- runtime.main <- goexit), %d frame-pointer steps", depth, c.UnwindFPFrames)
			}
			if tc.name == "go scheduler" {
				g0, past := uint64(0), uint64(0)
				for i, st := range stacks {
					for j, f := range st {
						if !strings.Contains(f, "runtime.mcall") {
							continue
						}
						g0 += counts[i]
						if j != len(st)-1 {
							past += counts[i]
							t.Errorf("%d samples walked past runtime.mcall: %s", counts[i], strings.Join(st, " <- "))
						}
						break
					}
				}
				if g0*10 < total || past > 0 {
					t.Errorf("%d of %d samples under runtime.mcall, %d of them walked past it", g0, total, past)
				}
			}
			if c.UnwindComplete*100 < c.UnwindStacks*99 {
				t.Errorf("%d of %d walks reached the outermost frame", c.UnwindComplete, c.UnwindStacks)
			}
		})
	}
}

// BenchmarkUnwindWorkloads reports, per workload and walk, the share of
// samples whose stack reaches a thread's root (_start) and the median
// depth: the table (Debian's xz, openssl, python3; a C program at
// -O2). b.N is not used.
func BenchmarkUnwindWorkloads(b *testing.B) {
	in := filepath.Join(b.TempDir(), "in")
	data, err := os.ReadFile("/usr/bin/xz")
	if err != nil {
		b.Fatal(err)
	}
	for len(data) < 64<<20 {
		data = append(data, data...)
	}
	if err := os.WriteFile(in, data, 0o644); err != nil {
		b.Fatal(err)
	}
	chain := buildC(b, chainC)
	workloads := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"xz-9e", func() *exec.Cmd { return exec.Command("sh", "-c", "exec xz -9e -T1 -c "+in+" > /dev/null") }},
		{"openssl-sha256", func() *exec.Cmd { return exec.Command("openssl", "speed", "-seconds", "30", "sha256") }},
		{"python3", func() *exec.Cmd {
			return exec.Command("/usr/bin/python3", "-c", "while True: sum(i * i for i in range(1000))")
		}},
		{"c-O2", func() *exec.Cmd { return exec.Command(chain, "5000") }},
	}
	for _, w := range workloads {
		for _, tables := range []bool{false, true} {
			walk := "frame-pointers"
			if tables {
				walk = "tables"
			}
			b.Run(w.name+"/"+walk, func(b *testing.B) {
				for b.Loop() {
				}
				stacks, counts, _, _ := sampleRun(b, w.cmd(), 3*time.Second, tables)
				share, depth, total := summarize(stacks, counts)
				if total == 0 {
					b.Fatal("no samples")
				}
				b.ReportMetric(100*share, "complete-%")
				b.ReportMetric(float64(depth), "median-depth")
				b.ReportMetric(float64(total), "samples")
			})
		}
	}
}
