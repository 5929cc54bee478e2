package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// pythonChain: hot_python_fn recursing under middle, reached from outer
// through C (list over map). Line numbers are asserted: keep the layout.
const pythonChain = `def hot_python_fn(n, depth):
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

// TestPythonProfile: Debian's python3, running before the agent starts,
// is published with its Python frames as "[python]" locations (function,
// file, line) where the eval loop's frames were, from the third interval.
func TestPythonProfile(t *testing.T) {
	e := newEnv(t)
	script := filepath.Join(t.TempDir(), "chain.py")
	if err := os.WriteFile(script, []byte(pythonChain), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", script)
	if err := cmd.Start(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(200 * time.Millisecond)

	a := start(t, e, Config{PIDs: []int{cmd.Process.Pid}, UnwindTableBytes: 16 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
	time.Sleep(4500 * time.Millisecond)
	a.stop(t)

	got := consume(t, e)
	if len(got.cpu) < 4 {
		t.Fatalf("%d cpu profiles", len(got.cpu))
	}
	want := "hot_python_fn:6 hot_python_fn:3 hot_python_fn:3 hot_python_fn:3 middle:10 outer:13 main:17 <module>:19"
	var total, hot, exact int64
	for _, p := range got.cpu[2:] {
		for _, s := range pidSamples([]*profile.Profile{p}, cmd.Process.Pid) {
			total += s.Value[0]
			var py []string
			ok := true
			for _, loc := range s.Location {
				if loc.Mapping == nil || loc.Mapping.File != record.MappingPython {
					continue
				}
				m := loc.Mapping
				if !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers || len(loc.Line) != 1 || loc.Line[0].Function.Filename != script {
					ok = false
					continue
				}
				py = append(py, loc.Line[0].Function.Name+":"+strconv.FormatInt(loc.Line[0].Line, 10))
			}
			if len(py) == 0 || !strings.HasPrefix(py[0], "hot_python_fn:") {
				continue
			}
			hot += s.Value[0]
			// The loop's two lines both hold the leaf.
			py[0] = strings.Replace(py[0], ":5", ":6", 1)
			if ok && strings.Join(py, " ") == want {
				exact += s.Value[0]
			} else {
				t.Logf("%d samples: %s", s.Value[0], strings.Join(py, " <- "))
			}
		}
	}
	t.Logf("%d samples from the third interval on, %d in hot_python_fn, %d with %s", total, hot, exact, want)
	if total < 50 || hot*100 < total*95 || exact*100 < hot*99 {
		t.Fatalf("%d samples, %d in hot_python_fn, %d exact", total, hot, exact)
	}
}
