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
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

// jsChain: hotJsFn called through middle from outer, each call long enough
// (tens of milliseconds) that neither the callers nor the top-level loop
// get hot enough for TurboFan to inline hotJsFn into them; hotJsFn's own
// loop is optimized on stack. Lines are asserted: keep the layout.
const jsChain = `'use strict';
function hotJsFn(n) {
  let x = 0;
  for (let i = 0; i < n; i++) {
    x = (x * 31 + i) & 0xffff;
  }
  return x;
}

function middle(n) {
  return hotJsFn(n) + 1;
}

function outer(n) {
  return middle(n) + 1;
}

let sink = 0;
for (;;) {
  sink ^= outer(30000000);
}
`

// Lines where jsChain's functions start (function keyword).
var jsLines = map[string]int{"hotJsFn": 2, "middle": 10, "outer": 14}

// nodeBin is Debian's node; a missing one fails under CI.
func nodeBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		bin, err = exec.LookPath("nodejs")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not installed (Debian's nodejs package)")
		}
		t.Skip("node not installed")
	}
	return bin
}

// jsRunStats samples cmd with tables and, withV8, its V8 layout registered;
// it returns its stacks (native frames as "file:function", JavaScript ones
// as "js:name:file:line", innermost first) and the BPF program's mean run
// time per sample over the host's samples while cmd ran.
func jsRunStats(t testing.TB, cmd *exec.Cmd, d time.Duration, withV8 bool) ([][]string, []uint64, Counters, *v8.Process, float64) {
	t.Helper()
	det := v8.NewDetector(v8.DefaultFileLimits)
	res := v8.NewResolver("/proc", v8.DefaultReadLimits, v8.DefaultCacheEntries, v8.DefaultCacheBytes)
	var js *v8.Process
	stacks, counts, c, ns := langWorkload{
		cmd: cmd, table: 32 << 20, maps: 4096,
		warm: 300 * time.Millisecond, settle: 500 * time.Millisecond, span: d,
		register: func(s *Sampler, fs proc.FS, pid int) {
			var err error
			if js, err = det.Detect(fs, pid, true); err != nil {
				t.Fatal(err)
			}
			if !withV8 {
				return
			}
			if err := s.SetV8(pid, js.BPF()); err != nil {
				t.Fatal(err)
			}
			res.Add(js)
		},
		remove: func(s *Sampler, pid int) { s.RemoveV8(pid) },
		stack: func(smp Sample, sym *symbolizer) ([]string, bool) {
			var st []string
			for i, v := range smp.User {
				if v8.IsFrame(v) {
					fn, err := res.Function(smp.PID, v8.DecodeFrame(v))
					if err != nil {
						st = append(st, "js:?")
						continue
					}
					st = append(st, fmt.Sprintf("js:%s:%s:%d", fn.Name, filepath.Base(fn.Script), fn.Line))
					continue
				}
				pc := v
				if i > 0 {
					pc--
				}
				st = append(st, sym.name(pc))
			}
			return st, true
		},
	}.run(t)
	return stacks, counts, c, js, ns
}

// jsFrames are the JavaScript frames of st, innermost first.
func jsFrames(st []string) []string {
	var out []string
	for _, f := range st {
		if strings.HasPrefix(f, "js:") {
			out = append(out, f[3:])
		}
	}
	return out
}

func writeChain(t testing.TB) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "chain.js")
	if err := os.WriteFile(script, []byte(jsChain), 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestJSFrames: Debian's node 20 (no flag) sampled on the real kernel.
// JavaScript frames are named from V8's metadata: hotJsFn <- middle <-
// outer <- the module's function, then node's native frames to _start.
func TestJSFrames(t *testing.T) {
	bin := nodeBin(t)
	script := writeChain(t)
	cmd := exec.Command(bin, script)
	cmd.Dir = filepath.Dir(script)
	stacks, counts, c, js, _ := jsRunStats(t, cmd, 3*time.Second, true)
	var total, hot, exact, lined uint64
	for i, st := range stacks {
		total += counts[i]
		fr := jsFrames(st)
		if len(fr) == 0 || !strings.HasPrefix(fr[0], "hotJsFn:") {
			if counts[i]*50 > total {
				t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
			}
			continue
		}
		hot += counts[i]
		var names []string
		ok := true
		for _, f := range fr {
			p := strings.Split(f, ":")
			names = append(names, p[0])
			if want, known := jsLines[p[0]]; known {
				ok = ok && p[1] == "chain.js" && p[2] == fmt.Sprint(want)
			}
		}
		if len(names) >= 3 && strings.Join(names[:3], " ") == "hotJsFn middle outer" {
			exact += counts[i]
			if ok {
				lined += counts[i]
			}
		} else {
			t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
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
	t.Logf("node %s builtins [%#x, %#x): %d samples, %d name hotJsFn (%.1f%%), %d hotJsFn <- middle <- outer, %d with files and lines; counters %+v",
		js.Path, js.CodeStart, js.CodeEnd, total, hot, 100*float64(hot)/float64(max(total, 1)), exact, lined, c)
	if total < 100 {
		t.Fatalf("only %d samples", total)
	}
	if hot*100 < total*95 {
		t.Errorf("%d of %d samples name hotJsFn, want 95%%", hot, total)
	}
	if exact*100 < hot*99 {
		t.Errorf("%d of %d hotJsFn samples have hotJsFn <- middle <- outer", exact, hot)
	}
}

// BenchmarkJSFrames samples the chain script for 3 s at 199 Hz with its V8
// layout registered and not (native tables only) and reports the share of
// its samples naming hotJsFn, the median number of JavaScript frames, and
// the BPF program's mean run time per sample (every sample on the host).
// b.N is not used.
func BenchmarkJSFrames(b *testing.B) {
	bin := nodeBin(b)
	script := writeChain(b)
	for _, withV8 := range []bool{false, true} {
		name := "native-only"
		if withV8 {
			name = "js-frames"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
			}
			cmd := exec.Command(bin, script)
			cmd.Dir = filepath.Dir(script)
			stacks, counts, _, _, ns := jsRunStats(b, cmd, 3*time.Second, withV8)
			var total, hot uint64
			var depths []int
			for i, st := range stacks {
				total += counts[i]
				fr := jsFrames(st)
				if len(fr) > 0 && strings.HasPrefix(fr[0], "hotJsFn:") {
					hot += counts[i]
				}
				for range counts[i] {
					depths = append(depths, len(fr))
				}
			}
			if total == 0 {
				b.Fatal("no samples")
			}
			b.ReportMetric(100*float64(hot)/float64(total), "hotJsFn-%")
			b.ReportMetric(float64(medianInt(depths)), "js-frames")
			b.ReportMetric(ns, "bpf-ns/sample")
			b.ReportMetric(float64(total), "samples")
		})
	}
}
