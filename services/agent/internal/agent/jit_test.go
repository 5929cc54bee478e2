package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// jitShare counts the samples of pid from the first profile holding one of
// its frames on the mapping file on: in all, with a frame whose function
// contains name, and with that frame as the leaf.
func jitShare(ps []*profile.Profile, pid int, file, name string) (total, named, leaf int64, intervals int) {
	started := false
	for _, p := range ps {
		samples := pidSamples([]*profile.Profile{p}, pid)
		if !started {
			for _, s := range samples {
				for _, loc := range s.Location {
					started = started || (loc.Mapping != nil && loc.Mapping.File == file)
				}
			}
			if !started {
				continue
			}
		}
		intervals++
		for _, s := range samples {
			total += s.Value[0]
			for i, loc := range userLocations(s) {
				if loc.Mapping == nil || loc.Mapping.File != file || len(loc.Line) == 0 || !strings.Contains(loc.Line[0].Function.Name, name) {
					continue
				}
				named += s.Value[0]
				if i == 0 {
					leaf += s.Value[0]
				}
				break
			}
		}
	}
	return total, named, leaf, intervals
}

func userLocations(s *profile.Sample) []*profile.Location {
	var out []*profile.Location
	for _, loc := range s.Location {
		if loc.Mapping == nil || loc.Mapping.File != kernelMappingFile {
			out = append(out, loc)
		}
	}
	return out
}

// TestJavaPerfMap: a JVM started without any flag, running as an
// unprivileged user, is asked for its perf map by the agent (jcmd
// Compiler.perfmap through the attach mechanism) and its hot method is
// named, kind java, in most of its samples from then on.
func TestJavaPerfMap(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
	}{
		{"jdk17", workload.JDK17, true},
		// "Most machines" have it: skipped where absent, even under CI.
		{"jdk25", workload.JDK25, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			e := newEnv(t)
			cmd := workload.StartJava(t, c.home, workload.Nobody)
			pid := cmd.Process.Pid
			time.Sleep(2 * time.Second) // the JVM started, hotJavaMethod compiled
			a := start(t, e, Config{PIDs: []int{pid}, PerfMaps: true, JavaPerfMap: true, JavaPerfMapInterval: time.Minute})
			time.Sleep(8 * time.Second)
			families, err := a.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			a.stop(t)
			for _, f := range families {
				if strings.Contains(f.GetName(), "perfmap") {
					for _, m := range f.GetMetric() {
						label := ""
						if len(m.GetLabel()) > 0 {
							label = m.GetLabel()[0].GetValue()
						}
						t.Logf("%s{%s} %.0f", f.GetName(), label, value(m))
					}
				}
			}
			got := consume(t, e)
			total, named, leaf, intervals := jitShare(got.cpu, pid, record.MappingJava, "Hot."+workload.JavaHotMethod)
			t.Logf("%s: %d of %d samples (%.1f%%) name Hot.%s, %d (%.1f%%) as the leaf, over %d intervals after the perf map",
				c.name, named, total, 100*float64(named)/float64(max(total, 1)), workload.JavaHotMethod, leaf, 100*float64(leaf)/float64(max(total, 1)), intervals)
			logTopStack(t, got.cpu, pid)
			if total < 100 || named*100 < total*80 {
				t.Fatalf("%d of %d samples name Hot.%s (want at least 80%%)", named, total, workload.JavaHotMethod)
			}
		})
	}
}

// TestNodePerfMap: node with --perf-basic-prof writes its perf map as it
// compiles; the agent names the hot function, kind js, with its script and
// line.
func TestNodePerfMap(t *testing.T) {
	e := newEnv(t)
	cmd := workload.StartNode(t, "--perf-basic-prof")
	pid := cmd.Process.Pid
	time.Sleep(time.Second)
	a := start(t, e, Config{PIDs: []int{pid}, PerfMaps: true, JavaPerfMap: true, JavaPerfMapInterval: time.Minute})
	time.Sleep(5 * time.Second)
	a.stop(t)
	got := consume(t, e)
	total, named, leaf, intervals := jitShare(got.cpu, pid, record.MappingJS, workload.JSHotFunction)
	t.Logf("node: %d of %d samples (%.1f%%) name %s, %d as the leaf, over %d intervals",
		named, total, 100*float64(named)/float64(max(total, 1)), workload.JSHotFunction, leaf, intervals)
	var line *profile.Line
	for _, p := range got.cpu {
		for _, loc := range p.Location {
			if loc.Mapping != nil && loc.Mapping.File == record.MappingJS && len(loc.Line) > 0 && loc.Line[0].Function.Name == workload.JSHotFunction {
				line = &loc.Line[0]
			}
		}
	}
	if line == nil {
		t.Fatalf("no [js] location names %s", workload.JSHotFunction)
	}
	if !strings.HasSuffix(line.Function.Filename, "hot.js") || line.Line != 1 || record.FrameKind(record.MappingJS) != record.KindJS {
		t.Errorf("%s at %s:%d:%d", line.Function.Name, line.Function.Filename, line.Line, line.Column)
	}
	if total < 50 || named*100 < total*50 {
		t.Fatalf("%d of %d samples name %s", named, total, workload.JSHotFunction)
	}
}

// logTopStack logs the user stack of pid's heaviest sample, innermost
// first: JIT frames by name, others by mapping file and address.
func logTopStack(t *testing.T, ps []*profile.Profile, pid int) {
	var top *profile.Sample
	for _, s := range pidSamples(ps, pid) {
		if top == nil || s.Value[0] > top.Value[0] {
			top = s
		}
	}
	if top == nil {
		return
	}
	var frames []string
	for _, loc := range userLocations(top) {
		switch {
		case len(loc.Line) > 0:
			frames = append(frames, loc.Mapping.File+" "+loc.Line[0].Function.Name)
		case loc.Mapping != nil && loc.Mapping.File != "":
			frames = append(frames, filepath.Base(loc.Mapping.File))
		default:
			frames = append(frames, fmt.Sprintf("%#x", loc.Address))
		}
	}
	t.Logf("heaviest stack (%d samples, %d frames): %s", top.Value[0], len(frames), strings.Join(frames, " <- "))
}
