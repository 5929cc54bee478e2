// Package testbin builds real binaries for the symbolizer's tests and
// benchmarks (gcc, g++, go) and turns their symbols into the runtime
// addresses an agent would report for them.
package testbin

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// CSource is a C program with two non-inlined functions.
const CSource = `#include <stdio.h>
__attribute__((noinline)) int leaf_work(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += i * i ^ (s >> 3);
	return s;
}
__attribute__((noinline)) int middle(int n) { return leaf_work(n) + 1; }
int main(int argc, char **argv) { printf("%d\n", middle(argc * 1000)); return 0; }
`

// CXXSource is a C++ program with a namespaced function that is always
// inlined into its caller.
const CXXSource = `#include <cstdio>
namespace geo {
struct Grid {
	__attribute__((always_inline)) inline int cell(int x, int y) const {
		return x * stride + y * y + (x ^ y);
	}
	int stride;
};
__attribute__((noinline)) int sweep(const Grid &g, int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += g.cell(i, s & 7);
	return s;
}
} // namespace geo
int main(int argc, char **) {
	geo::Grid g{argc + 3};
	std::printf("%d\n", geo::sweep(g, argc * 1000));
	return 0;
}
`

// GoSource is a Go program with functions that stay out of line.
const GoSource = `package main

import (
	"fmt"
	"os"
)

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i*i ^ (s >> 3)
	}
	return s
}

//go:noinline
func outer(n int) int { return spin(n) + 1 }

func main() { fmt.Println(outer(len(os.Args) * 1000)) }
`

// Binary is a built program.
type Binary struct {
	Path      string // the file a process maps (stripped where the test wants it)
	DebugPath string // a separate debug file, or the unstripped binary
	BuildID   string
	Exec      elf.ProgHeader // the executable PT_LOAD segment of Path
}

// Need skips (or fails under CI) when a tool is missing.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true and %s is missing", tool)
			}
			t.Skipf("skipping: %s not installed", tool)
		}
	}
}

// BuildC compiles CSource with -g, keeps the debug info in name.debug and
// strips name, the way distributions ship binaries.
func BuildC(t testing.TB, dir, name string) *Binary {
	t.Helper()
	Need(t, "gcc", "objcopy", "strip")
	src := filepath.Join(dir, name+".c")
	write(t, src, CSource)
	bin := filepath.Join(dir, name)
	testenv.Run(t, dir, nil, "gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o", bin, src)
	dbg := bin + ".debug"
	testenv.Run(t, dir, nil, "objcopy", "--only-keep-debug", bin, dbg)
	testenv.Run(t, dir, nil, "strip", "--strip-debug", "--strip-unneeded", bin)
	return load(t, bin, dbg)
}

// BuildCXX compiles CXXSource with -O2 -g, unstripped.
func BuildCXX(t testing.TB, dir, name string) *Binary {
	t.Helper()
	Need(t, "g++")
	src := filepath.Join(dir, name+".cc")
	write(t, src, CXXSource)
	bin := filepath.Join(dir, name)
	testenv.Run(t, dir, nil, "g++", "-O2", "-g", "-Wl,--build-id", "-o", bin, src)
	return load(t, bin, bin)
}

// BuildGo compiles GoSource twice: stripped (-s -w) as the binary, and
// unstripped as the reference. Both carry the same GNU build ID.
func BuildGo(t testing.TB, dir, name string) *Binary {
	t.Helper()
	src := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "main.go"), GoSource)
	write(t, filepath.Join(src, "go.mod"), "module example.com/"+name+"\n\ngo 1.21\n")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	env := []string{"GOWORK=off", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0"}
	bin := filepath.Join(dir, name)
	ref := bin + ".unstripped"
	testenv.Run(t, src, env, goBin, "build", "-trimpath", "-ldflags=-s -w -B gobuildid", "-o", bin, ".")
	testenv.Run(t, src, env, goBin, "build", "-trimpath", "-ldflags=-B gobuildid", "-o", ref, ".")
	return load(t, bin, ref)
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func load(t testing.TB, path, debug string) *Binary {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	b := &Binary{Path: path, DebugPath: debug}
	b.BuildID, err = BuildID(ef)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			b.Exec = p.ProgHeader
			break
		}
	}
	return b
}

// BuildID reads the GNU build ID note.
func BuildID(ef *elf.File) (string, error) {
	s := ef.Section(".note.gnu.build-id")
	if s == nil {
		return "", fmt.Errorf("no .note.gnu.build-id")
	}
	data, err := s.Data()
	if err != nil || len(data) < 16 {
		return "", fmt.Errorf("read build id note: %v", err)
	}
	namesz := ef.ByteOrder.Uint32(data[0:4])
	descsz := ef.ByteOrder.Uint32(data[4:8])
	off := 12 + (namesz+3)&^3
	if uint32(len(data)) < off+descsz {
		return "", fmt.Errorf("truncated build id note")
	}
	return hex.EncodeToString(data[off : off+descsz]), nil
}

// Symbol returns the address and size of a function in the debug file.
func (b *Binary) Symbol(t testing.TB, name string) (addr, size uint64) {
	t.Helper()
	ef, err := elf.Open(b.DebugPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value, s.Size
		}
	}
	t.Fatalf("%s: no function %s", b.DebugPath, name)
	return 0, 0
}

// Mapping is the executable mapping a process has of the binary when it is
// loaded at base (for position-dependent binaries use base 0).
func (b *Binary) Mapping(base uint64) (start, limit, offset uint64) {
	const page = 4096
	start = base + b.Exec.Vaddr&^(page-1)
	limit = (base + b.Exec.Vaddr + b.Exec.Memsz + page - 1) &^ (page - 1)
	return start, limit, b.Exec.Off &^ (page - 1)
}

// RuntimeAddr is where vaddr sits in a process that loaded the binary at base.
func (b *Binary) RuntimeAddr(vaddr, base uint64) uint64 {
	start, _, offset := b.Mapping(base)
	fileOff := vaddr - b.Exec.Vaddr + b.Exec.Off
	return start + fileOff - offset
}

// Base is a load address for the binary: PIE objects (ET_DYN) get a typical
// randomized-looking base, executables 0.
func (b *Binary) Base(t testing.TB) uint64 {
	ef, err := elf.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if ef.Type == elf.ET_DYN {
		return 0x55d4c3a00000
	}
	return 0
}

// Addr2Line asks binutils' addr2line (the reference) for the frames of vaddr,
// innermost first, as "function file:line" with the file's base name.
func Addr2Line(t testing.TB, file string, vaddr uint64) []string {
	t.Helper()
	Need(t, "addr2line")
	out, err := exec.Command("addr2line", "-f", "-i", "-C", "-e", file, fmt.Sprintf("%#x", vaddr)).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var frames []string
	for i := 0; i+1 < len(lines); i += 2 {
		loc := lines[i+1]
		if j := strings.Index(loc, " ("); j >= 0 {
			loc = loc[:j] // "(discriminator 1)"
		}
		fn := lines[i]
		if j := strings.Index(fn, "("); j > 0 {
			fn = fn[:j] // parameters
		}
		frames = append(frames, fn+" "+filepath.Base(loc))
	}
	return frames
}

// Debuginfod runs Debian's real debuginfod on a free loopback port over dir
// and waits until it serves every build ID in wait (as debuginfo or
// executable). It is stopped when the test ends.
func Debuginfod(t testing.TB, dir string, wait ...string) string {
	t.Helper()
	return DebuginfodEnv(t, dir, nil, wait...)
}

// DebuginfodEnv is Debuginfod with more environment for the server, such
// as DEBUGINFOD_URLS to make it ask upstream servers for what it lacks.
func DebuginfodEnv(t testing.TB, dir string, env []string, wait ...string) string {
	t.Helper()
	Need(t, "debuginfod")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logf, err := os.Create(filepath.Join(t.TempDir(), "debuginfod.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("debuginfod", "-p", strconv.Itoa(port), "-d", filepath.Join(t.TempDir(), "db.sqlite"),
		"-F", "-t", "1", "-g", "0", "-c", "1", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start debuginfod: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/metrics")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("debuginfod at %s does not answer after 60s; log:\n%s", url, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range wait {
		for {
			if servedAny(url, id) {
				break
			}
			if time.Now().After(deadline) {
				out, _ := os.ReadFile(logf.Name())
				t.Fatalf("debuginfod at %s does not serve %s after 60s; log:\n%s", url, id, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return url
}

func servedAny(url, id string) bool {
	for _, kind := range []string{"debuginfo", "executable"} {
		resp, err := http.Get(url + "/buildid/" + id + "/" + kind)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
	}
	return false
}
