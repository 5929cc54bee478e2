package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/python"
)

// pythonChain: outer calls middle through C (list over map), so middle is
// the entry frame of a second eval-loop C frame; middle -> hot_python_fn
// recursion runs inside that one C frame. Line numbers are asserted: keep
// the layout.
const pythonChain = `import sys

def hot_python_fn(n, depth):
    if depth > 0:
        return hot_python_fn(n, depth - 1)
    x = 0
    for i in range(n):
        x = (x * 31 + i) & 0xffff
    return x

def middle(n):
    return hot_python_fn(n, 3)

def outer(n):
    return list(map(middle, [n]))

def main():
    while True:
        outer(200000)

main()
`

// Lines of pythonChain.
var (
	pythonLoopLines   = map[int]bool{7: true, 8: true}
	pythonRecurseLine = 5
	pythonMiddleLine  = 12
	pythonOuterLine   = 15
	pythonMainLine    = 19
	pythonModuleLine  = 21
)

// pythonRun samples cmd with tables and its CPython state registered, and
// returns its stacks: native frames as "file:function", Python frames as
// "py:qualname:line" (innermost first).
func pythonRun(t testing.TB, cmd *exec.Cmd, d time.Duration) ([][]string, []uint64, Counters, *python.Process) {
	stacks, counts, c, py, _ := pythonRunStats(t, cmd, d, true)
	return stacks, counts, c, py
}

// pythonRunStats is pythonRun, with the CPython state registered or not
// (tables only), and the BPF program's mean run time per sample over the
// host's samples while cmd ran.
func pythonRunStats(t testing.TB, cmd *exec.Cmd, d time.Duration, withPython bool) ([][]string, []uint64, Counters, *python.Process, float64) {
	t.Helper()
	res := python.NewResolver("/proc", python.DefaultLimits, python.DefaultCacheEntries, python.DefaultCacheBytes)
	var py *python.Process
	stacks, counts, c, ns := langWorkload{
		cmd: cmd, table: 16 << 20, maps: 4096,
		warm: 200 * time.Millisecond, settle: 300 * time.Millisecond, span: d,
		register: func(s *Sampler, fs proc.FS, pid int) {
			var err error
			if py, err = python.Detect(fs, pid, true); err != nil {
				t.Fatal(err)
			}
			if !withPython {
				return
			}
			if err := s.SetPython(pid, py.BPF()); err != nil {
				t.Fatal(err)
			}
			res.Add(py)
		},
		remove: func(s *Sampler, pid int) { s.RemovePython(pid) },
		stack: func(smp Sample, sym *symbolizer) ([]string, bool) {
			var st []string
			native := 0
			for _, v := range smp.User {
				if python.IsFrame(v) {
					f := python.DecodeFrame(v)
					c, err := res.Code(smp.PID, f.Code)
					if err != nil {
						st = append(st, "py:?")
						continue
					}
					st = append(st, fmt.Sprintf("py:%s:%d", c.Qualname, c.Line(f.Instr)))
					continue
				}
				pc := v
				// A return address follows its call, which may end a function.
				if native > 0 {
					pc--
				}
				native++
				st = append(st, sym.name(pc))
			}
			return st, true
		},
	}.run(t)
	return stacks, counts, c, py, ns
}

// pythonFrames are the Python frames of st, innermost first, without lines;
// gaps[i] is how many native frames lie between Python frames i and i+1.
func pythonFrames(st []string) (names []string, lines []int, gaps []int) {
	last := -1
	for i, f := range st {
		if !strings.HasPrefix(f, "py:") {
			continue
		}
		k := strings.LastIndexByte(f, ':')
		var line int
		fmt.Sscan(f[k+1:], &line)
		names = append(names, f[3:k])
		lines = append(lines, line)
		if last >= 0 {
			gaps = append(gaps, i-last-1)
		}
		last = i
	}
	return names, lines, gaps
}

// TestPythonFrames: Debian's python3 (no flag, no debug info used) sampled
// on the real kernel. Each eval-loop C frame is replaced by the Python
// frames it runs: hot_python_fn x4 <- middle in one (middle is its entry
// frame), then the C frames of list(map(...)), then outer <- main <-
// <module> in the outer one, then the interpreter's native frames to
// _start.
func TestPythonFrames(t *testing.T) {
	bin := "/usr/bin/python3"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	script := filepath.Join(t.TempDir(), "chain.py")
	if err := os.WriteFile(script, []byte(pythonChain), 0o644); err != nil {
		t.Fatal(err)
	}
	stacks, counts, c, py := pythonRun(t, exec.Command(bin, script), 2*time.Second)
	var total, hot, exact, lined uint64
	want := []string{"hot_python_fn", "hot_python_fn", "hot_python_fn", "hot_python_fn", "middle", "outer", "main", "<module>"}
	for i, st := range stacks {
		total += counts[i]
		names, lines, gaps := pythonFrames(st)
		if len(names) == 0 || names[0] != "hot_python_fn" {
			if counts[i]*50 > total {
				t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
			}
			continue
		}
		hot += counts[i]
		ok := strings.Join(names, " ") == strings.Join(want, " ") && complete(st)
		// Python frames run by one C frame are adjacent; between middle
		// and outer lie the C frames of list(map(...)).
		for j, g := range gaps {
			if j == 4 {
				ok = ok && g > 0
			} else {
				ok = ok && g == 0
			}
		}
		for _, f := range st {
			ok = ok && !strings.HasSuffix(f, ":_PyEval_EvalFrameDefault")
		}
		if ok {
			exact += counts[i]
			if pythonLoopLines[lines[0]] && lines[1] == pythonRecurseLine && lines[4] == pythonMiddleLine &&
				lines[5] == pythonOuterLine && lines[6] == pythonMainLine && lines[7] == pythonModuleLine {
				lined += counts[i]
			}
		} else {
			// A sample can land in a C helper of a call (CPython 3.11
			// links the callee's frame only after pushing it), where the
			// caller is the innermost Python frame: the share below
			// bounds these, so they are shown, not failed one by one.
			t.Logf("%d samples not exact: %s", counts[i], strings.Join(st, " <- "))
		}
	}
	top := 0
	for i := range stacks {
		if counts[i] > counts[top] {
			top = i
		}
	}
	if len(stacks) > 0 {
		t.Logf("most frequent stack (%d samples): %s", counts[top], strings.Join(stacks[top], " <- "))
	}
	t.Logf("python %s at %#x: %d samples, %d in hot_python_fn, %d with the exact chain, %d with every line; counters %+v",
		py.Version, py.Runtime, total, hot, exact, lined, c)
	if total < 50 {
		t.Fatalf("only %d samples", total)
	}
	if hot*100 < total*95 {
		t.Errorf("%d of %d samples name hot_python_fn, want 95%%", hot, total)
	}
	if exact*100 < hot*99 {
		t.Errorf("%d of %d hot_python_fn samples have the exact interleaved chain", exact, hot)
	}
	if lined*100 < exact*95 {
		t.Errorf("%d of %d exact samples have the expected lines", lined, exact)
	}
}

// BenchmarkPythonFrames samples the chain script for 3 s at 199 Hz with its
// CPython state registered and not (native tables only) and reports the
// share of its samples naming hot_python_fn, the median number of Python
// frames, and the BPF program's mean run time per sample (every sample on
// the host). b.N is not used.
func BenchmarkPythonFrames(b *testing.B) {
	script := filepath.Join(b.TempDir(), "chain.py")
	if err := os.WriteFile(script, []byte(pythonChain), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, withPython := range []bool{false, true} {
		name := "native-only"
		if withPython {
			name = "python-frames"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
			}
			stacks, counts, _, _, ns := pythonRunStats(b, exec.Command("/usr/bin/python3", script), 3*time.Second, withPython)
			var total, hot uint64
			var depths []int
			for i, st := range stacks {
				total += counts[i]
				names, _, _ := pythonFrames(st)
				if len(names) > 0 && names[0] == "hot_python_fn" {
					hot += counts[i]
				}
				for range counts[i] {
					depths = append(depths, len(names))
				}
			}
			if total == 0 {
				b.Fatal("no samples")
			}
			b.ReportMetric(100*float64(hot)/float64(total), "hot_python_fn-%")
			b.ReportMetric(float64(medianInt(depths)), "python-frames")
			b.ReportMetric(ns, "bpf-ns/sample")
			b.ReportMetric(float64(total), "samples")
		})
	}
}
