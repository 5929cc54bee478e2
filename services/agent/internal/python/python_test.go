package python

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// python311 returns Debian's python3.11, skipping (failing under CI) when
// it is absent.
func python311(t testing.TB) string {
	t.Helper()
	bin := "/usr/bin/python3.11"
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin
}

// TestLayout311MatchesHeaders compiles offsetof of every field of the 3.11
// layout against the installed CPython headers (libpython3.11-dev, installed
// by .ci/run).
func TestLayout311MatchesHeaders(t *testing.T) {
	inc := "/usr/include/python3.11"
	if _, err := os.Stat(inc + "/internal/pycore_frame.h"); err != nil {
		testenv.Unavailable(t, "python3.11 internal headers (libpython3.11-dev): %v", err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Unavailable(t, "gcc: %v", err)
	}
	l, err := LayoutOf(Version{3, 11})
	if err != nil {
		t.Fatal(err)
	}
	fields := []struct {
		expr string
		got  uint16
	}{
		{"offsetof(_PyRuntimeState, gilstate.tstate_current)", l.RuntimeTstateCurrent},
		{"offsetof(_PyRuntimeState, interpreters.head)", l.RuntimeInterpHead},
		{"offsetof(PyInterpreterState, threads.head)", l.InterpThreadsHead},
		{"offsetof(PyThreadState, next)", l.TstateNext},
		{"offsetof(PyThreadState, thread_id)", l.TstateThreadID},
		{"offsetof(PyThreadState, cframe)", l.TstateFrame},
		{"offsetof(_PyCFrame, current_frame)", l.CframeCurrentFrame},
		{"offsetof(_PyInterpreterFrame, f_code)", l.FrameCode},
		{"offsetof(_PyInterpreterFrame, previous)", l.FramePrev},
		{"offsetof(_PyInterpreterFrame, prev_instr)", l.FrameInstr},
		{"offsetof(_PyInterpreterFrame, is_entry)", l.FrameIsEntry},
		{"offsetof(_PyInterpreterFrame, owner)", l.FrameOwner},
		{"offsetof(PyCodeObject, co_firstlineno)", l.CodeFirstLine},
		{"offsetof(PyCodeObject, co_filename)", l.CodeFilename},
		{"offsetof(PyCodeObject, co_qualname)", l.CodeQualname},
		{"offsetof(PyCodeObject, co_linetable)", l.CodeLinetable},
		{"offsetof(PyCodeObject, co_code_adaptive)", l.CodeUnits},
		{"offsetof(PyASCIIObject, length)", l.UnicodeLength},
		{"offsetof(PyASCIIObject, state)", l.UnicodeState},
		{"sizeof(PyASCIIObject)", l.UnicodeASCII},
		{"sizeof(PyCompactUnicodeObject)", l.UnicodeCompact},
		{"offsetof(PyVarObject, ob_size)", l.BytesSize},
		{"offsetof(PyBytesObject, ob_sval)", l.BytesData},
		{"offsetof(PyObject, ob_type)", objectType},
	}
	var src strings.Builder
	src.WriteString("#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <internal/pycore_frame.h>\n#include <internal/pycore_runtime.h>\n#include <internal/pycore_interp.h>\n#include <stdio.h>\n#include <stddef.h>\nint main(void) {\n")
	for _, f := range fields {
		src.WriteString("\tprintf(\"%zu\\n\", (size_t)" + f.expr + ");\n")
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	c := filepath.Join(dir, "off.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "off")
	if out, err := exec.Command("gcc", "-I"+inc, "-I"+inc+"/internal", "-o", bin, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(fields) {
		t.Fatalf("%d values for %d fields", len(lines), len(fields))
	}
	for i, f := range fields {
		if want, _ := strconv.Atoi(lines[i]); uint16(want) != f.got {
			t.Errorf("%s = %d, layout has %d", f.expr, want, f.got)
		}
	}
}

// lineDump prints, for every code object of a few stdlib modules and
// their nested functions, the location table and co_lines().
const lineDump = `
import json, sys, types, inspect, json.decoder, argparse, email.message, asyncio.base_events
def walk(c):
    yield c
    for k in c.co_consts:
        if isinstance(k, types.CodeType):
            yield from walk(k)
for m in (json, inspect, json.decoder, argparse, email.message, asyncio.base_events):
    src = compile(open(m.__file__).read(), m.__file__, "exec")
    for c in walk(src):
        print(json.dumps({"q": c.co_qualname, "first": c.co_firstlineno, "table": c.co_linetable.hex(),
            "lines": [[s // 2, e // 2, l] for s, e, l in c.co_lines()]}))
`

// TestLineOfMatchesCPython: LineOf gives co_lines()'s line at every code
// unit of every code object of six stdlib modules, as CPython itself
// computes them.
func TestLineOfMatchesCPython(t *testing.T) {
	out, err := exec.Command(python311(t), "-c", lineDump).Output()
	if err != nil {
		t.Fatal(err)
	}
	var codes, units int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c struct {
			Q     string
			First int
			Table string
			Lines [][3]*int
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		table, _ := hex.DecodeString(c.Table)
		codes++
		for _, r := range c.Lines {
			for u := *r[0]; u < *r[1]; u++ {
				units++
				got, ok := LineOf(table, c.First, u)
				if r[2] == nil {
					if ok {
						t.Errorf("%s unit %d: line %d, CPython has none", c.Q, u, got)
					}
					continue
				}
				if !ok || got != *r[2] {
					t.Errorf("%s unit %d: line %d (%v), CPython %d", c.Q, u, got, ok, *r[2])
				}
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	if codes < 500 {
		t.Fatalf("only %d code objects", codes)
	}
	t.Logf("%d code objects, %d code units", codes, units)
}

// codeDump defines functions with known names (one not ASCII, one in a
// UCS-2 and one in a UCS-4 class name), prints their code objects'
// addresses and what ReadCode must find, then waits.
const codeDump = `
import sys, json
class Ünïcode:
    def méthode(self):
        return 1
class 漢字:
    def f(self):
        return 2
class Ext𠀀:
    def g(self):
        return 3
def plain(a, b):
    x = a + b
    return x
for c in (plain.__code__, Ünïcode.méthode.__code__, 漢字.f.__code__, Ext𠀀.g.__code__):
    print(json.dumps({"addr": id(c), "q": c.co_qualname, "file": c.co_filename, "first": c.co_firstlineno, "table": c.co_linetable.hex()}))
sys.stdout.flush()
sys.stdin.read()
`

// TestReadCodeLive reads code objects out of a running python3.11 through
// /proc/PID/mem, found by Detect from the interpreter's symbols alone.
func TestReadCodeLive(t *testing.T) {
	cmd := exec.Command(python311(t), "-c", codeDump)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	type want struct {
		Addr  uint64
		Q     string
		File  string
		First int
		Table string
	}
	var wants []want
	sc := bufio.NewScanner(stdout)
	for len(wants) < 4 && sc.Scan() {
		var w want
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
		wants = append(wants, w)
	}
	if len(wants) != 4 {
		t.Fatalf("python printed %d code objects: %v", len(wants), sc.Err())
	}
	p, err := Detect(proc.FS{Root: "/proc"}, cmd.Process.Pid, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != (Version{3, 11}) || p.EvalEnd <= p.EvalStart {
		t.Fatalf("detected %+v", p)
	}
	r := NewResolver("/proc", DefaultLimits, 2, 1<<20)
	r.Add(p)
	for _, w := range wants {
		c, err := r.Code(p.PID, w.Addr)
		if err != nil {
			t.Fatalf("%s: %v", w.Q, err)
		}
		if c.Qualname != w.Q || c.Filename != w.File || c.FirstLine != w.First || hex.EncodeToString(c.LineTable) != w.Table {
			t.Errorf("read %q %q %d %x, python says %q %q %d %s", c.Qualname, c.Filename, c.FirstLine, c.LineTable, w.Q, w.File, w.First, w.Table)
		}
	}
	if n, _ := r.Len(); n != 2 {
		t.Errorf("cache holds %d entries, bound 2", n)
	}
	// Not a code object: a str (the filename's), and garbage addresses.
	for _, addr := range []uint64{wants[0].Addr + 8, 0, 0x10, 1 << 50, wants[0].Addr + 4096*1024*1024} {
		if _, err := ReadCode(mustMem(t, p.PID), p, addr, DefaultLimits); err == nil {
			t.Errorf("ReadCode(%#x) read a code object", addr)
		}
	}
	// A limit cuts names at a character boundary.
	c, err := ReadCode(mustMem(t, p.PID), p, wants[1].Addr, Limits{MaxStringBytes: 9, MaxLineTableBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if c.Qualname != "Ünïcode" || len(c.LineTable) != 4 {
		t.Errorf("cut to 9 bytes: %q, table %d bytes", c.Qualname, len(c.LineTable))
	}
}

func mustMem(t *testing.T, pid int) *os.File {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFrameEncoding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     uint64
		frame Frame
	}{
		{"code and instr", 1<<63 | 12<<45 | 0x7f0012345678>>3, Frame{Code: 0x7f0012345678, Instr: 12}},
		{"saturated instr", 1<<63 | (1<<18-1)<<45 | 0x1000>>3, Frame{Code: 0x1000, Instr: 1<<18 - 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !IsFrame(tc.v) || DecodeFrame(tc.v) != tc.frame {
				t.Errorf("%#x: %v %+v, want %+v", tc.v, IsFrame(tc.v), DecodeFrame(tc.v), tc.frame)
			}
		})
	}
	if IsFrame(0x7fff12345678) {
		t.Error("a user address taken for a Python frame")
	}
}
