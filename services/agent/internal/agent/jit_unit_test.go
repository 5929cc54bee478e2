package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/javaattach"
	"github.com/stackstream/stackstream/services/agent/internal/perfmap"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
)

// fakeJITProcess makes a fake /proc entry for pid (seeing itself as nspid)
// whose root holds a perf map with content, and a process in ps with one
// anonymous executable mapping at [0x1000, 0x100000).
func fakeJITProcess(t *testing.T, ps *processes, pid, nspid int, exe, content string) (*process, string) {
	t.Helper()
	dir := filepath.Join(ps.fs.Root, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	status := fmt.Sprintf("Name:\tx\nNSpid:\t%d\t%d\nUid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\nSigCgt:\t0\n", pid, nspid, uid, uid, uid, uid, gid, gid, gid, gid)
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	perfMap := filepath.Join(dir, "root", "tmp", fmt.Sprintf("perf-%d.map", nspid))
	if err := os.WriteFile(perfMap, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &process{info: proc.Info{PID: pid, StartTime: 1, Executable: exe}, targeted: true, mapsRead: 1,
		maps: []mapping{{Mapping: proc.Mapping{Start: 0x1000, Limit: 0x100000}, checked: 1}}}
	p.labels = labelsOf(p.info)
	ps.procs[pid] = p
	return p, perfMap
}

func newTestJIT(t *testing.T, now func() time.Time) *processes {
	targets, err := proc.NewTargets(nil, nil, nil, "", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ps := newProcesses(proc.FS{Root: t.TempDir()}, targets, newFileGate(5*time.Second, now))
	ps.jit = newJITFrames(slog.New(slog.DiscardHandler), ps.fs, ps.files, now, prometheus.NewRegistry(), time.Minute)
	return ps
}

// TestJITLocations: addresses in anonymous executable memory are named from
// the process's perf map (found through its own PID), under the pseudo-file
// of its runtime; appends are read on the next interval; another process
// with the same addresses gets its own names; a process gone is forgotten.
func TestJITLocations(t *testing.T) {
	now := time.Unix(1000, 0)
	ps := newTestJIT(t, func() time.Time { return now })
	_, nodeMap := fakeJITProcess(t, ps, 100, 7, "/usr/bin/node", "2000 100 JS:*hotJsFunction /srv/hot.js:3:10\n")
	other, _ := fakeJITProcess(t, ps, 200, 8, "/usr/bin/luajit", "2000 100 trace 1\n")
	build := func(samples ...sampler.Sample) *cpuProfile {
		ps.interval++
		c := newCPUProfile(ps, nil, now, time.Second, 1e7)
		for _, s := range samples {
			c.add(ps.procs[s.PID], s)
		}
		return c
	}
	c := build(sampler.Sample{PID: 100, User: []uint64{0x2010, 0x3000, 0x200000}, Count: 1},
		sampler.Sample{PID: 200, User: []uint64{0x2010}, Count: 1})
	s := c.p.Sample[0]
	if loc := s.Location[0]; loc.Mapping.File != record.MappingJS || loc.Line[0].Function.Name != "hotJsFunction" ||
		loc.Line[0].Function.Filename != "/srv/hot.js" || loc.Line[0].Line != 3 || loc.Line[0].Column != 10 || !loc.Mapping.HasFunctions {
		t.Fatalf("leaf %+v %+v", loc.Mapping, loc.Line)
	}
	if loc := s.Location[1]; loc.Mapping.File != "" || len(loc.Line) != 0 {
		t.Fatalf("0x3000 (not in the map) named: %+v", loc.Line)
	}
	if loc := c.p.Sample[1].Location[0]; loc.Mapping.File != record.MappingJIT || loc.Line[0].Function.Name != "trace 1" {
		t.Fatalf("other process: %+v %+v", loc.Mapping, loc.Line)
	}
	if err := c.p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	// Appended: read on the next interval.
	f, _ := os.OpenFile(nodeMap, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("3000 10 LazyCompile:~later /srv/hot.js:9\n")
	f.Close()
	c = build(sampler.Sample{PID: 100, User: []uint64{0x3000}, Count: 1})
	if loc := c.p.Sample[0].Location[0]; len(loc.Line) == 0 || loc.Line[0].Function.Name != "later" || loc.Line[0].Line != 9 {
		t.Fatalf("appended entry: %+v", loc.Line)
	}
	// Gone: dropped at the tick.
	delete(ps.procs, other.info.PID)
	ps.jit.tick(ps, nil)
	if _, ok := ps.jit.procs[200]; ok || ps.jit.procs[100] == nil {
		t.Fatalf("after the exit of 200: %v", ps.jit.procs)
	}
}

// TestJavaAttachSchedule: a JVM sampled is asked at once, again after the
// period, backs off after failures (up to an hour), and is never signalled
// again once it showed no handler or no listener.
func TestJavaAttachSchedule(t *testing.T) {
	now := time.Unix(1000, 0)
	ps := newTestJIT(t, func() time.Time { return now })
	p, _ := fakeJITProcess(t, ps, 300, 300, "/usr/bin/java", "")
	p.maps = append(p.maps, mapping{Mapping: proc.Mapping{Start: 0x200000, Limit: 0x300000, Path: "/usr/lib/jvm/x/lib/server/libjvm.so", Inode: 1}})
	j := ps.jit
	jp := j.process(ps, p)
	if jp.runtime != perfmap.RuntimeJava {
		t.Fatalf("runtime %v", jp.runtime)
	}
	// What tick would do, without starting a real attach.
	due := func() bool {
		return !jp.attaching && !jp.attachOff && !now.Before(jp.nextAttach)
	}
	answer := func(err error) {
		jp.attaching = true
		j.answered(attachResult{pid: 300, start: 1, err: err})
	}
	if !due() {
		t.Fatal("not asked on discovery")
	}
	answer(nil)
	if due() || !jp.nextAttach.Equal(now.Add(time.Minute)) {
		t.Fatalf("next %v", jp.nextAttach)
	}
	for i, want := range []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour} {
		answer(errors.New("connection refused"))
		if got := jp.nextAttach.Sub(now); got != want {
			t.Fatalf("failure %d: next in %s, want %s", i+1, got, want)
		}
	}
	answer(nil)
	if jp.failures != 0 {
		t.Fatal("success did not reset the backoff")
	}
	answer(fmt.Errorf("x: %w", javaattach.ErrNoListener))
	now = now.Add(24 * time.Hour)
	if due() {
		t.Fatal("signalled again after no listener came")
	}
}

func TestJITCandidate(t *testing.T) {
	b := &binary{}
	for _, c := range []struct {
		m    *mapping
		want bool
	}{
		{nil, true},
		{&mapping{}, true},
		{&mapping{Mapping: proc.Mapping{Path: "[anon:v8]"}}, true},
		{&mapping{Mapping: proc.Mapping{Path: "[vdso]"}}, false},
		{&mapping{Mapping: proc.Mapping{Path: "/usr/bin/node"}, file: b}, false},
		{&mapping{Mapping: proc.Mapping{Path: "/memfd:jit (deleted)"}, file: b}, true},
	} {
		if got := jitCandidate(c.m); got != c.want {
			t.Errorf("%+v: %v", c.m, got)
		}
	}
}

func TestJITEvict(t *testing.T) {
	ps := newTestJIT(t, time.Now)
	j := ps.jit
	for pid, used := range map[int]uint64{1: 1, 2: 5, 3: 3} {
		j.procs[pid] = &jitProcess{used: used, reader: perfmap.NewReader(perfmap.DefaultLimits)}
	}
	j.evict(5, 1, 0)
	if _, ok := j.procs[1]; ok || len(j.procs) != 2 {
		t.Fatalf("kept %v", j.procs)
	}
	j.evict(5, 5, 0)
	if len(j.procs) != 1 || j.procs[2] == nil {
		t.Fatalf("the process used this interval was evicted: %v", j.procs)
	}
}

func TestConfigJavaPerfMap(t *testing.T) {
	c := Config{Frequency: 19, Interval: 10 * time.Second, CountsMapSize: 64, StacksMapSize: 64, BufferRecords: 1, BufferBytes: 1 << 20,
		HeapMaxCompressedBytes: 1024, HeapMaxBytes: 1024, HeapMaxEntries: 16, HeapTimeout: time.Second, FileTimeout: time.Second, DebuginfoHold: time.Second,
		PerfMaps: true, JavaPerfMap: true, JavaPerfMapInterval: 100 * time.Millisecond, Kubernetes: "off"}
	if err := c.Validate(); err == nil {
		t.Fatal("100ms accepted")
	}
	c.JavaPerfMap = false
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
