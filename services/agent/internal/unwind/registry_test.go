package unwind

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// fakeLoader counts rows against a capacity, as the BPF array does.
type fakeLoader struct {
	capacity, used int
	next           uint32
	loads          int
	live           map[uint32]int // first -> rows
	procs          map[int][]Mapping
}

func newFakeLoader(capacity int) *fakeLoader {
	return &fakeLoader{capacity: capacity, live: map[uint32]int{}, procs: map[int][]Mapping{}}
}

func (l *fakeLoader) LoadRows(rows []Row) (uint32, error) {
	if l.used+len(rows) > l.capacity {
		return 0, fmt.Errorf("load: %w", ErrNoRoom)
	}
	first := l.next
	l.next += uint32(len(rows))
	l.used += len(rows)
	l.live[first] = len(rows)
	l.loads++
	return first, nil
}

func (l *fakeLoader) RowCapacity() int { return l.capacity }

func (l *fakeLoader) FreeRows(first uint32, n int) {
	if l.live[first] != n {
		panic(fmt.Sprintf("free %d rows at %d, loaded %d", n, first, l.live[first]))
	}
	delete(l.live, first)
	l.used -= n
}

func (l *fakeLoader) SetProcess(pid int, m []Mapping) error { l.procs[pid] = m; return nil }
func (l *fakeLoader) RemoveProcess(pid int)                 { delete(l.procs, pid) }

func startProcess(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(50 * time.Millisecond) // the dynamic loader maps the libraries
	return cmd.Process.Pid
}

// TestRegistrySharesAndEvicts: two processes of one binary load its tables
// (and those of libc, ld.so and the vDSO) once; tables of exited processes stay until their room is needed, then go
// least recently used first.
func TestRegistrySharesAndEvicts(t *testing.T) {
	testenv.Root(t) // map_files
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fs := proc.FS{Root: "/proc"}
	sleep := compileFile(t, "/usr/bin/sleep")
	py := startProcess(t, python3Path(t), "-c", "import time; time.sleep(60)")
	need := 0
	prep, err := NewRegistry(log, fs, newFakeLoader(0), DefaultLimits).Prepare(py, true, false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[*Table]bool{}
	for _, pm := range prep.mappings {
		if pm.table != nil && !seen[pm.table] {
			seen[pm.table] = true
			need += len(pm.table.Rows)
		}
	}
	// Room for python3's files (libc and ld.so among them) and half of
	// sleep's table: python3 fits only once sleep's table is evicted.
	l := newFakeLoader(need + len(sleep.Rows)/2)
	r := NewRegistry(log, fs, l, DefaultLimits)

	a, b := startProcess(t, "sleep", "60"), startProcess(t, "sleep", "61")
	for _, pid := range []int{a, b} {
		if err := r.AddProcess(pid); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	// sleep, libc, ld.so and the vDSO, once.
	if l.loads != 4 || st.Tables != 4 || st.Processes != 2 {
		t.Fatalf("two sleeps: %d loads, stats %+v", l.loads, st)
	}
	if len(l.procs[a]) < 3 || l.procs[a][0].Rows == 0 {
		t.Fatalf("mappings of sleep: %+v", l.procs[a])
	}
	r.RemoveProcess(a)
	r.RemoveProcess(b)
	if len(l.procs) != 0 {
		t.Fatalf("processes left: %v", l.procs)
	}
	// python3 maps libc and ld.so again (shared, still loaded) and needs
	// room for itself: sleep's table, unmapped, is evicted.
	if err := r.AddProcess(py); err != nil {
		t.Fatal(err)
	}
	st = r.Stats()
	t.Logf("after python3: %d loads, %+v, %d of %d rows used", l.loads, st, l.used, l.capacity)
	if st.Tables < 3 || l.used > l.capacity {
		t.Fatalf("stats %+v, %d rows used of %d", st, l.used, l.capacity)
	}
	// sleep was loaded first, at row 0.
	if _, ok := l.live[0]; ok {
		t.Errorf("sleep's table, mapped by no process, was not evicted: %v", l.live)
	}
	for _, m := range l.procs[py] {
		if m.Rows == 0 && m.Start != 0xffffffffff600000 { // [vsyscall] has none
			t.Errorf("mapping %#x-%#x of python3 without a table", m.Start, m.Limit)
		}
	}
}

// TestRegistryKeysByBuildID: two copies of one binary (other paths, other
// inodes, one build ID) share one table; a binary without a build ID gets
// its own.
func TestRegistryKeysByBuildID(t *testing.T) {
	testenv.Root(t) // map_files
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	copyOf := func(src, dst string, extra ...string) string {
		t.Helper()
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
		for _, args := range extra {
			if out, err := exec.Command("objcopy", args, dst).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
		}
		return dst
	}
	dir := t.TempDir()
	one := copyOf("/usr/bin/sleep", dir+"/one")
	two := copyOf("/usr/bin/sleep", dir+"/two")
	anon := copyOf("/usr/bin/sleep", dir+"/anon", "--remove-section=.note.gnu.build-id")
	l := newFakeLoader(1 << 20)
	r := NewRegistry(log, proc.FS{Root: "/proc"}, l, DefaultLimits)
	add := func(bin string) int {
		t.Helper()
		pid := startProcess(t, bin, "60")
		if err := r.AddProcess(pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	first := add(one)
	// The copy, libc, ld.so and the vDSO.
	if st := r.Stats(); l.loads != 4 || st.Tables != 4 {
		t.Fatalf("first copy: %d loads, stats %+v", l.loads, st)
	}
	add(two)
	add("/usr/bin/sleep")
	if st := r.Stats(); l.loads != 4 || st.Tables != 4 || st.Processes != 3 {
		t.Fatalf("three copies of one build ID: %d loads, stats %+v", l.loads, st)
	}
	// The executable's first mapping: the same rows in every copy.
	for pid, ms := range l.procs {
		if len(ms) < 3 || ms[0].Rows == 0 || ms[0].FirstRow != l.procs[first][0].FirstRow || ms[0].Rows != l.procs[first][0].Rows {
			t.Fatalf("mappings of pid %d: %+v", pid, ms)
		}
	}
	add(anon)
	if st := r.Stats(); l.loads != 5 || st.Tables != 5 {
		t.Fatalf("a copy without build ID: %d loads, stats %+v", l.loads, st)
	}
}

// TestRegistryDeferNew: a registration with deferNew builds no table for
// keys not loaded yet and leaves their mappings out (the BPF walk marks the
// process when it meets one); the next registration without it builds them,
// and a process mapping only keys now loaded defers nothing.
func TestRegistryDeferNew(t *testing.T) {
	testenv.Root(t) // map_files
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l := newFakeLoader(8 << 20)
	r := NewRegistry(log, proc.FS{Root: "/proc"}, l, DefaultLimits)
	a := startProcess(t, "sleep", "60")
	files := func(pid int) int {
		n := 0
		for _, m := range l.procs[pid] {
			if m.Rows != 0 {
				n++
			}
		}
		return n
	}
	register := func(pid int, deferNew bool) Prepared {
		t.Helper()
		p, err := r.Prepare(pid, true, deferNew)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Commit(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// sleep, libc and ld.so put off; the vDSO's table is the agent's own.
	p := register(a, true)
	if p.Deferred != 3 || p.Compiled != 0 || l.loads != 1 || files(a) != 1 {
		t.Fatalf("deferred: %+v, %d loads, %d mappings with rows: %+v", p, l.loads, files(a), l.procs[a])
	}
	// Registered again with them deferred: the files are known now (one
	// stat each), still nothing built.
	if p = register(a, true); p.Deferred != 3 || l.loads != 1 {
		t.Fatalf("deferred again: %+v, %d loads", p, l.loads)
	}
	// Sampled: built.
	if p = register(a, false); p.Deferred != 0 || p.Compiled != 3 || l.loads != 4 || files(a) != 4 {
		t.Fatalf("built: %+v, %d loads, %d mappings with rows", p, l.loads, files(a))
	}
	// Another sleep finds every table loaded: nothing to defer.
	b := startProcess(t, "sleep", "61")
	if p = register(b, true); p.Deferred != 0 || l.loads != 4 || files(b) != 4 {
		t.Fatalf("second sleep: %+v, %d loads, %d mappings with rows", p, l.loads, files(b))
	}
	if st := r.Stats(); st.Tables != 4 || st.Processes != 2 {
		t.Fatalf("stats %+v", st)
	}
}
