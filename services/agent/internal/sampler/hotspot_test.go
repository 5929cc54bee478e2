package sampler

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// javaMainComm is the name of the thread running main: the launcher's
// thread keeps the process's name; the VM's own threads are named for what
// they do (C2 CompilerThre, VM Thread, GC Thread#0).
const javaMainComm = "java"

// javaRunStats samples cmd with tables and, withJava, its code cache
// registered, after warm (the JVM starting, hotJavaMethod compiled); it
// returns the stacks of the thread running main (native frames as
// "file:function", Java ones as "java:Class.method", innermost first) and
// the BPF program's mean run time per sample over the host's samples.
func javaRunStats(t testing.TB, cmd *exec.Cmd, comm string, warm, d time.Duration, withJava bool) ([][]string, []uint64, Counters, *hotspot.Process, float64) {
	t.Helper()
	det := hotspot.NewDetector(hotspot.DefaultTableLimits)
	res := hotspot.NewResolver("/proc", hotspot.DefaultReadLimits, hotspot.DefaultCacheEntries, hotspot.DefaultCacheBytes)
	var jvm *hotspot.Process
	stacks, counts, c, ns := langWorkload{
		cmd: cmd, table: 64 << 20, maps: 8192,
		warm: warm, settle: 500 * time.Millisecond, span: d,
		register: func(s *Sampler, fs proc.FS, pid int) {
			var err error
			if jvm, err = det.Detect(fs, pid, true); err != nil {
				t.Fatal(err)
			}
			if !withJava {
				return
			}
			if err := s.SetHotSpot(pid, jvm.BPF()); err != nil {
				t.Fatal(err)
			}
			res.Add(jvm)
		},
		remove: func(s *Sampler, pid int) { s.RemoveHotSpot(pid) },
		stack: func(smp Sample, sym *symbolizer) ([]string, bool) {
			if smp.Comm != comm {
				return nil, false
			}
			var st []string
			for i, v := range smp.User {
				if hotspot.IsFrame(v) {
					m, err := res.Method(smp.PID, hotspot.DecodeFrame(v))
					if err != nil {
						st = append(st, "java:?")
						continue
					}
					if hotspot.Interpreted(v) {
						st = append(st, "java:"+m.Function()+" (interpreted)")
					} else {
						st = append(st, "java:"+m.Function())
					}
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
	return stacks, counts, c, jvm, ns
}

// javaFrames are the Java frames of st, innermost first.
func javaFrames(st []string) []string {
	var out []string
	for _, f := range st {
		if strings.HasPrefix(f, "java:") {
			out = append(out, strings.TrimSuffix(f[5:], " (interpreted)"))
		}
	}
	return out
}

// javaRoot reports whether st reaches the root of the thread running main:
// the launcher's JavaMain under libc's thread start.
func javaRoot(st []string) bool {
	for _, f := range st {
		if strings.HasSuffix(f, ":JavaMain") {
			return complete(st) || strings.HasPrefix(st[len(st)-1], "libc.so.6:")
		}
	}
	return false
}

// TestJavaFrames: HotSpot 17 (Debian's default JDK) and 25 (Temurin, where
// present), without flags and interpreted only (-Xint), sampled on the
// real kernel: hotJavaMethod <- middle <- outer <- main named from the
// VM's own tables, then the native frames to the thread's root.
func TestJavaFrames(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
		flags      []string
	}{
		{"jdk17", workload.JDK17, true, nil},
		{"jdk17-xint", workload.JDK17, true, []string{"-Xint"}},
		{"jdk25", workload.JDK25, false, nil},
		{"jdk25-xint", workload.JDK25, false, []string{"-Xint"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			cmd := workload.JavaChain(t, c.home, c.flags...)
			stacks, counts, ctr, jvm, _ := javaRunStats(t, cmd, javaMainComm, 1500*time.Millisecond, 4*time.Second, true)
			want := strings.Join(workload.JavaChainMethods, " ")
			var total, hot, exact, rooted, compiled uint64
			top := 0
			for i, st := range stacks {
				total += counts[i]
				if counts[i] > counts[top] {
					top = i
				}
				if javaRoot(st) {
					rooted += counts[i]
				}
				fr := javaFrames(st)
				if len(fr) == 0 || fr[0] != workload.JavaChainMethods[0] {
					if counts[i]*50 > total {
						t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
					}
					continue
				}
				hot += counts[i]
				if !strings.HasSuffix(st[0], "(interpreted)") {
					compiled += counts[i]
				}
				if strings.Join(fr, " ") == want {
					exact += counts[i]
				} else {
					t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
				}
			}
			if len(stacks) > 0 {
				t.Logf("most frequent stack (%d samples): %s", counts[top], strings.Join(stacks[top], " <- "))
			}
			t.Logf("%s: code cache [%#x, %#x), %d heaps, interpreter [%#x, %#x): %d samples, %d name hotJavaMethod (%.1f%%), %d compiled, %d exact chain, %d reach the thread root (%.1f%%); counters %+v",
				jvm.Path, jvm.CodeStart, jvm.CodeEnd, len(jvm.Heaps), jvm.InterpStart, jvm.InterpEnd, total, hot,
				100*float64(hot)/float64(max(total, 1)), compiled, exact, rooted, 100*float64(rooted)/float64(max(total, 1)), ctr)
			// On a loaded host the thread gets fewer samples: 50 still tell.
			if total < 50 {
				t.Fatalf("only %d samples", total)
			}
			if hot*100 < total*95 {
				t.Errorf("%d of %d samples name hotJavaMethod, want 95%%", hot, total)
			}
			if exact*100 < hot*95 {
				t.Errorf("%d of %d hotJavaMethod samples have %s", exact, hot, want)
			}
			// Without -Xint hotJavaMethod's loop is compiled within the warm-up.
			if interpreted := len(c.flags) > 0; (interpreted && compiled > 0) || (!interpreted && compiled*100 < hot*90) {
				t.Errorf("%d of %d hotJavaMethod samples compiled, flags %v", compiled, hot, c.flags)
			}
			if rooted*100 < total*95 {
				t.Errorf("%d of %d samples reach the thread root, want 95%%", rooted, total)
			}
		})
	}
}

// TestJavaFramesMixed: a Java thread started by Java (root: the VM's
// thread_native_entry under libc) recursing through compiled frames into a
// loop of megamorphic interface calls to tiny compiled methods, on 17 and
// 25: its stacks reach the root through compiled -> compiled frames,
// prologues and epilogues, with the Java frames in order.
func TestJavaFramesMixed(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
	}{
		{"jdk17", workload.JDK17, true},
		{"jdk25", workload.JDK25, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			cmd := workload.JavaMix(t, c.home)
			stacks, counts, ctr, _, _ := javaRunStats(t, cmd, "worker", 3*time.Second, 4*time.Second, true)
			var total, rooted, ordered uint64
			top := 0
			for i, st := range stacks {
				total += counts[i]
				if counts[i] > counts[top] {
					top = i
				}
				all := strings.Join(st, " <- ")
				if strings.HasSuffix(st[len(st)-1], "libc.so.6:?") && strings.Contains(all, ":_ZL19thread_native_entryP6Thread") {
					rooted += counts[i]
				} else {
					t.Logf("%d samples not rooted: %s", counts[i], all)
				}
				fr := javaFrames(st)
				rec, lambda, run := slices.Index(fr, "Mix.rec"), slices.Index(fr, "Mix.lambda$main$0"), slices.Index(fr, "java.lang.Thread.run")
				if lambda >= 0 && lambda < run && rec < lambda {
					ordered += counts[i]
				} else {
					t.Logf("%d samples out of order: %s", counts[i], all)
				}
			}
			if len(stacks) > 0 {
				t.Logf("most frequent stack (%d samples): %s", counts[top], strings.Join(stacks[top], " <- "))
			}
			t.Logf("%d samples, %d reach the thread root (%.1f%%), %d with [Mix.rec <-] Mix.lambda$main$0 <- Thread.run; counters %+v",
				total, rooted, 100*float64(rooted)/float64(max(total, 1)), ordered, ctr)
			if total < 50 {
				t.Fatalf("only %d samples", total)
			}
			if rooted*100 < total*95 || ordered*100 < total*95 {
				t.Errorf("%d of %d samples rooted, %d in order, want 95%%", rooted, total, ordered)
			}
		})
	}
}

// TestJavaFramesNative: samples in the C side of a JDK native method
// (Runtime.availableProcessors) go up through its native wrapper (an
// nmethod, named "native nmethod" on 17) and the Java frames to the root,
// on 17 and 25.
func TestJavaFramesNative(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
	}{
		{"jdk17", workload.JDK17, true},
		{"jdk25", workload.JDK25, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			cmd := workload.JavaNative(t, c.home)
			stacks, counts, ctr, _, _ := javaRunStats(t, cmd, javaMainComm, 2*time.Second, 3*time.Second, true)
			var total, rooted, named uint64
			for i, st := range stacks {
				total += counts[i]
				if javaRoot(st) {
					rooted += counts[i]
				}
				fr := javaFrames(st)
				native, main := slices.Index(fr, "java.lang.Runtime.availableProcessors"), slices.Index(fr, "Nat.main")
				if native >= 0 && native < main && main == len(fr)-1 {
					named += counts[i]
				} else {
					t.Logf("%d samples: %s", counts[i], strings.Join(st, " <- "))
				}
			}
			t.Logf("%d samples, %d reach the thread root, %d with Runtime.availableProcessors <- ... <- Nat.main; counters %+v", total, rooted, named, ctr)
			if total < 50 {
				t.Fatalf("only %d samples", total)
			}
			if rooted*100 < total*95 || named*100 < total*95 {
				t.Errorf("%d of %d samples rooted, %d named, want 95%%", rooted, total, named)
			}
		})
	}
}

// BenchmarkJavaFrames samples the Java chain for 3 s at 199 Hz with its
// code cache registered and not (native tables only) and reports the share
// of its main thread's samples naming hotJavaMethod, the median number of
// Java frames, and the BPF program's mean run time per sample (every
// sample on the host). b.N is not used.
func BenchmarkJavaFrames(b *testing.B) {
	for _, withJava := range []bool{false, true} {
		name := "native-only"
		if withJava {
			name = "java-frames"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
			}
			cmd := workload.JavaChain(b, workload.JDK17)
			stacks, counts, _, _, ns := javaRunStats(b, cmd, javaMainComm, 1500*time.Millisecond, 3*time.Second, withJava)
			var total, hot uint64
			var depths []int
			for i, st := range stacks {
				total += counts[i]
				fr := javaFrames(st)
				if len(fr) > 0 && fr[0] == workload.JavaChainMethods[0] {
					hot += counts[i]
				}
				for range counts[i] {
					depths = append(depths, len(fr))
				}
			}
			if total == 0 {
				b.Fatal("no samples")
			}
			b.ReportMetric(100*float64(hot)/float64(total), "hotJavaMethod-%")
			b.ReportMetric(float64(medianInt(depths)), "java-frames")
			b.ReportMetric(ns, "bpf-ns/sample")
			b.ReportMetric(float64(total), "samples")
		})
	}
}
