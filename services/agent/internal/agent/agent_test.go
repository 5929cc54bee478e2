package agent

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestProfilesWorkloads profiles a C and a Go program the test builds and
// checks what the symbolizer will see: labels, mappings, and through the
// published debuginfo, the hot function holding most samples.
func TestProfilesWorkloads(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	cases := []struct {
		name, exe, hot string
	}{
		{"c", workload.BuildC(t, dir, "hotc", false), workload.CHotFunction},
		{"go stripped", workload.BuildGo(t, dir, "hotgo", true), workload.GoHotFunction},
	}
	procs := make([]*workload.Process, len(cases))
	var targets []int
	for i, c := range cases {
		procs[i] = workload.Start(t, c.exe, 0)
		targets = append(targets, procs[i].PID)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) { pprof.Lookup("heap").WriteTo(w, 0) })
	// A hostile endpoint: 64 MiB of zeros in ~64 KiB of gzip.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	chunk := make([]byte, 1<<20)
	for range 64 {
		zw.Write(chunk)
	}
	zw.Close()
	mux.HandleFunc("/bomb", func(w http.ResponseWriter, r *http.Request) { w.Write(bomb.Bytes()) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	a := start(t, e, Config{PIDs: targets, Memory: true, HeapEndpoints: []string{"bomb=" + srv.URL + "/bomb", "self=" + srv.URL + "/debug/pprof/heap"}})
	time.Sleep(4 * time.Second)
	a.stop(t)
	got := consume(t, e)
	if len(got.cpu) < 2 || len(got.memory) < 2 || len(got.heap) < 2 {
		t.Fatalf("%d cpu, %d memory, %d heap profiles, want at least 2 each", len(got.cpu), len(got.memory), len(got.heap))
	}
	if s := got.heap[0].Sample; len(s) == 0 || s[0].Label[record.LabelService][0] != "self" {
		t.Fatalf("heap profile samples %v", s)
	}
	if n := counterValue(t, a.reg, "stackstream_agent_heap_scrape_errors_total"); n < 2 {
		t.Fatalf("%v heap scrape errors counted, want one per interval for the bomb", n)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pid := procs[i].PID
			samples := pidSamples(got.cpu, pid)
			if len(samples) == 0 {
				t.Fatalf("no samples for pid %d", pid)
			}
			leaf := map[string]int64{}
			var total int64
			for _, s := range samples {
				if s.Label[record.LabelComm][0] != filepath.Base(c.exe) {
					t.Fatalf("comm label %v, want %s", s.Label[record.LabelComm], filepath.Base(c.exe))
				}
				if s.Label[record.LabelExecutable][0] != c.exe {
					t.Fatalf("executable label %v, want %s", s.Label[record.LabelExecutable], c.exe)
				}
				if s.Label[record.LabelService][0] != filepath.Base(c.exe) {
					t.Fatalf("service label %v", s.Label[record.LabelService])
				}
				for _, loc := range s.Location {
					if loc.Mapping == nil || loc.Mapping.File == kernelMappingFile {
						continue
					}
					if loc.Address < loc.Mapping.Start || loc.Address >= loc.Mapping.Limit {
						t.Fatalf("address %#x outside its mapping %#x-%#x", loc.Address, loc.Mapping.Start, loc.Mapping.Limit)
					}
				}
				fn := leafFunction(s, got.debuginfo)
				if fn == c.hot {
					if m := leafMapping(s); m == nil || m.File != c.exe {
						t.Fatalf("hot leaf frame in mapping %+v, want the executable %s", m, c.exe)
					}
				}
				leaf[fn] += s.Value[0]
				total += s.Value[0]
			}
			// The leaf frame lies in the workload's executable mapping.
			if leaf[c.hot]*2 < total {
				t.Fatalf("%s holds %d of %d samples; leaves: %v", c.hot, leaf[c.hot], total, leaf)
			}
			t.Logf("%s: %d of %d samples in %s", c.name, leaf[c.hot], total, c.hot)
			if rss := pidSamples(got.memory, pid); len(rss) == 0 || rss[0].Value[0] <= 0 {
				t.Fatalf("no RSS sample for pid %d", pid)
			}
		})
	}
	if n := len(pids(got.cpu)); n != len(cases) {
		t.Fatalf("cpu profiles hold %d pids, want only the %d targeted", n, len(cases))
	}
}

// TestCPUTimeMatchesKernel compares the CPU time in the profiles of a process
// that spins a fixed amount and then sleeps with the kernel's utime+stime.
func TestCPUTimeMatchesKernel(t *testing.T) {
	e := newEnv(t)
	exe := workload.BuildC(t, t.TempDir(), "cpuacct", false)
	a := start(t, e, Config{Comm: "^cpuacct$", Memory: false})
	p := workload.Start(t, exe, 4*time.Second)
	p.Wait(t, 60*time.Second)
	st, err := proc.FS{Root: "/proc"}.ReadStat(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	// Let the interval holding the last samples end.
	time.Sleep(2500 * time.Millisecond)
	a.stop(t)
	got := consume(t, e)
	var profiled int64
	for _, s := range pidSamples(got.cpu, p.PID) {
		profiled += s.Value[1]
	}
	const ticksPerSecond = 100 // USER_HZ
	kernel := time.Duration(st.UTime+st.STime) * time.Second / ticksPerSecond
	diff := float64(time.Duration(profiled)-kernel) / float64(kernel)
	t.Logf("profiled %s, kernel utime+stime %s (%+.1f%%)", time.Duration(profiled), kernel, diff*100)
	if diff > 0.10 || diff < -0.10 {
		t.Fatalf("profiled CPU %s differs from the kernel's %s by %.1f%%", time.Duration(profiled), kernel, diff*100)
	}
}

// TestTargets runs three busy processes: one named by --pids, one in a
// systemd unit's cgroup named by --systemd-units, and one in neither, which
// must stay out of every profile.
func TestTargets(t *testing.T) {
	e := newEnv(t)
	exe := workload.BuildC(t, t.TempDir(), "target", false)
	byPID := workload.Start(t, exe, 0)
	inUnit := workload.Start(t, exe, 0)
	other := workload.Start(t, exe, 0)
	unit := fmt.Sprintf("stackstream-test-%d.service", os.Getpid())
	placeInUnit(t, unit, inUnit.PID)

	a := start(t, e, Config{PIDs: []int{byPID.PID}, SystemdUnits: []string{unit}, Memory: true})
	time.Sleep(3 * time.Second)
	a.stop(t)
	got := consume(t, e)
	for kind, ps := range map[string]map[string]bool{"cpu": pids(got.cpu), "memory": pids(got.memory)} {
		want := map[string]bool{fmt.Sprint(byPID.PID): true, fmt.Sprint(inUnit.PID): true}
		if len(ps) != 2 || !ps[fmt.Sprint(byPID.PID)] || !ps[fmt.Sprint(inUnit.PID)] {
			t.Fatalf("%s profiles hold pids %v, want exactly %v (not %d)", kind, ps, want, other.PID)
		}
	}
	for _, s := range pidSamples(got.cpu, inUnit.PID) {
		if s.Label[record.LabelSystemdUnit][0] != unit || s.Label[record.LabelService][0] != unit[:len(unit)-len(".service")] {
			t.Fatalf("unit labels %v", s.Label)
		}
	}
}

// placeInUnit moves pid into a cgroup named like a systemd unit, where
// systemd would put it: in the named systemd hierarchy (cgroup v1) or the
// unified one (v2). systemd is not PID 1 here, so systemd-run cannot.
func placeInUnit(t *testing.T, unit string, pid int) {
	t.Helper()
	root := "/sys/fs/cgroup/systemd"
	if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
		root = "/sys/fs/cgroup"
		if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
			t.Fatalf("no writable systemd or unified cgroup hierarchy under /sys/fs/cgroup")
		}
	}
	slice := filepath.Join(root, "stackstream-test.slice")
	dir := filepath.Join(slice, unit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, dir, err)
	}
	t.Cleanup(func() {
		// The process is killed by its own cleanup, registered earlier and
		// so run later: move it out first so the cgroup can go.
		os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644)
		os.Remove(dir)
		os.Remove(slice)
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if cg := proc.ParseCgroup(string(b)); cg.SystemdUnit != unit {
		t.Fatalf("pid %d cgroup %q parses as unit %q", pid, b, cg.SystemdUnit)
	}
}

// TestDebuginfoPublishedOnce restarts the agent: the second run reads the
// build IDs already on the compacted topic and publishes none again.
func TestDebuginfoPublishedOnce(t *testing.T) {
	e := newEnv(t)
	exe := workload.BuildC(t, t.TempDir(), "once", false)
	p := workload.Start(t, exe, 0)
	cfg := Config{PIDs: []int{p.PID}}
	a := start(t, e, cfg)
	time.Sleep(2500 * time.Millisecond)
	a.stop(t)
	first := a.result("debuginfo/ok")
	if first == 0 {
		t.Fatal("first run published no debuginfo")
	}
	got := consume(t, e)
	if len(got.debuginfo) != first {
		t.Fatalf("%d debuginfo records acknowledged, %d build IDs on the topic", first, len(got.debuginfo))
	}
	b := start(t, e, cfg)
	time.Sleep(2500 * time.Millisecond)
	b.stop(t)
	if n := b.result("debuginfo/ok"); n != 0 {
		t.Fatalf("second run republished %d debuginfo records", n)
	}
	if b.result("cpu/ok") == 0 {
		t.Fatal("second run published no cpu profile")
	}
}
