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

// jsChain: hotJsFn called through middle from outer, each call long
// enough that TurboFan inlines none of them into its caller. Lines are
// asserted: keep the layout.
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

// TestJSProfile: Debian's node 20, started without any flag before the
// agent, is published with its JavaScript frames as "[js]" locations
// (function, script, the line the function starts on) from the third
// interval.
func TestJSProfile(t *testing.T) {
	e := newEnv(t)
	bin, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not installed (Debian's nodejs package)")
		}
		t.Skip("node not installed")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "chain.js")
	if err := os.WriteFile(script, []byte(jsChain), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, script)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(300 * time.Millisecond)

	a := start(t, e, Config{PIDs: []int{cmd.Process.Pid}, UnwindTableBytes: 32 << 20, UnwindMappings: 4096, UnwindProcesses: 64})
	time.Sleep(4500 * time.Millisecond)
	a.stop(t)

	got := consume(t, e)
	if len(got.cpu) < 4 {
		t.Fatalf("%d cpu profiles", len(got.cpu))
	}
	want := "hotJsFn:2 middle:10 outer:14"
	var total, hot, exact int64
	for _, p := range got.cpu[2:] {
		for _, s := range pidSamples([]*profile.Profile{p}, cmd.Process.Pid) {
			total += s.Value[0]
			var js []string
			ok := true
			for _, loc := range s.Location {
				if loc.Mapping == nil || loc.Mapping.File != record.MappingJS {
					continue
				}
				m := loc.Mapping
				if !m.HasFunctions || len(loc.Line) != 1 {
					ok = false
					continue
				}
				fn := loc.Line[0].Function
				if strings.HasPrefix(fn.Name, "hotJsFn") || fn.Name == "middle" || fn.Name == "outer" {
					ok = ok && fn.Filename == script
				}
				js = append(js, fn.Name+":"+strconv.FormatInt(loc.Line[0].Line, 10))
			}
			if len(js) == 0 || !strings.HasPrefix(js[0], "hotJsFn:") {
				t.Logf("%d samples: %s", s.Value[0], strings.Join(js, " <- "))
				continue
			}
			hot += s.Value[0]
			if ok && len(js) >= 3 && strings.Join(js[:3], " ") == want {
				exact += s.Value[0]
			} else {
				t.Logf("%d samples: %s", s.Value[0], strings.Join(js, " <- "))
			}
		}
	}
	t.Logf("%d samples from the third interval on, %d name hotJsFn (%.1f%%), %d with %s", total, hot,
		100*float64(hot)/float64(max(total, 1)), exact, want)
	if total < 50 || hot*100 < total*95 || exact*100 < hot*99 {
		t.Fatalf("%d samples, %d in hotJsFn, %d exact", total, hot, exact)
	}
}
