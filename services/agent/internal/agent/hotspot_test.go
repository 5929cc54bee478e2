package agent

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestJavaProfile: HotSpot 17 and 25, started without any flag before the
// agent, are published with their Java frames as "[java]" locations
// (Class.method, the source file) from the VM's own tables, in call order,
// above the native frames down to the thread's root, from the third
// interval. A JVM started after the agent is found once its code cache
// exists (registered again at its next samples until then).
func TestJavaProfile(t *testing.T) {
	for _, c := range []struct {
		name, home string
		need       bool
		after      bool // the JVM starts after the agent
	}{
		{"jdk17", workload.JDK17, true, false},
		{"jdk17-started-after", workload.JDK17, true, true},
		{"jdk25", workload.JDK25, false, false}, // skipped where absent, even under CI
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.home); err != nil && !c.need {
				t.Skipf("%s: %v", c.home, err)
			}
			e := newEnv(t)
			cmd := workload.JavaChain(t, c.home)
			cfg := Config{UnwindTableBytes: 64 << 20, UnwindMappings: 8192, UnwindProcesses: 64,
				PerfMaps: true, JavaPerfMap: true, JavaPerfMapInterval: time.Minute}
			var a *running
			if c.after {
				// The JVM's PID is not known yet: its name.
				cfg.Comm = "^java$"
				a = start(t, e, cfg)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			pid := cmd.Process.Pid
			if !c.after {
				time.Sleep(time.Second)
				cfg.PIDs = []int{pid}
				a = start(t, e, cfg)
			}
			time.Sleep(6500 * time.Millisecond)
			a.stop(t)

			got := consume(t, e)
			if len(got.cpu) < 4 {
				t.Fatalf("%d cpu profiles", len(got.cpu))
			}
			want := strings.Join(workload.JavaChainMethods, " <- ")
			var total, hot, exact, rooted int64
			stubs := map[string]int64{}
			for _, p := range got.cpu[2:] {
				for _, s := range pidSamples([]*profile.Profile{p}, pid) {
					total += s.Value[0]
					var java []string
					ok := true
					jli := false
					user := userLocations(s)
					for _, loc := range user {
						if loc.Mapping != nil && strings.HasSuffix(loc.Mapping.File, "/libjli.so") {
							jli = true
						}
						if loc.Mapping == nil || loc.Mapping.File != record.MappingJava || loc.Address != 0 {
							continue
						}
						if !loc.Mapping.HasFunctions || len(loc.Line) != 1 {
							ok = false
							continue
						}
						fn := loc.Line[0].Function
						if strings.HasPrefix(fn.Name, "Chain.") {
							ok = ok && fn.Filename == "Chain.java"
						}
						java = append(java, fn.Name)
					}
					if n := len(user); jli && n > 0 && user[n-1].Mapping != nil && strings.HasSuffix(user[n-1].Mapping.File, "/libc.so.6") {
						rooted += s.Value[0]
					}
					// The call stub below main is named by its blob (or, in a
					// JVM asked before it was registered, its perf map).
					for i, loc := range user {
						if len(loc.Line) == 1 && loc.Line[0].Function.Name == "Chain.main" && i+1 < len(user) {
							if next := user[i+1]; next.Mapping != nil && next.Mapping.File == record.MappingJava && len(next.Line) == 1 {
								stubs[next.Line[0].Function.Name] += s.Value[0]
							}
						}
					}
					java = slices.DeleteFunc(java, func(n string) bool { return !strings.HasPrefix(n, "Chain.") })
					if len(java) == 0 || java[0] != workload.JavaChainMethods[0] {
						t.Logf("%d samples: %s", s.Value[0], strings.Join(java, " <- "))
						continue
					}
					hot += s.Value[0]
					if ok && strings.Join(java, " <- ") == want {
						exact += s.Value[0]
					} else {
						t.Logf("%d samples: %s", s.Value[0], strings.Join(java, " <- "))
					}
				}
			}
			logTopStack(t, got.cpu, pid)
			t.Logf("below main: %v", stubs)
			if len(stubs) == 0 {
				t.Errorf("the call stub below main is not named")
			}
			t.Logf("%d samples from the third interval on, %d name hotJavaMethod (%.1f%%), %d with %s, %d reach the thread root (%.1f%%)",
				total, hot, 100*float64(hot)/float64(max(total, 1)), exact, want, rooted, 100*float64(rooted)/float64(max(total, 1)))
			// A loaded host gives the JVM few samples: 20 still tell.
			if total < 20 || hot*100 < total*95 || exact*100 < hot*95 || rooted*100 < total*95 {
				t.Fatalf("%d samples, %d in hotJavaMethod, %d exact, %d rooted", total, hot, exact, rooted)
			}
		})
	}
}
