// Package workload builds and runs the programs the agent's tests profile: a
// C program with frame pointers and a known hot function, and a Go program.
// Each spins in its hot function for a given time, prints "done", then sleeps
// until killed, so its CPU time can be read from /proc after the spin.
package workload

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// Hot functions of the workloads, as their symbols name them.
const (
	CHotFunction  = "hot_function"
	GoHotFunction = "main.hotFunction"
)

const cSource = `#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) uint64_t hot_function(uint64_t n) {
	volatile uint64_t x = 0;
	for (uint64_t i = 0; i < n; i++)
		x += i * i;
	return x;
}

__attribute__((noinline)) void spin(double secs) {
	double end = now() + secs;
	while (now() < end)
		hot_function(200000);
}

int main(int argc, char **argv) {
	spin(argc > 1 ? atof(argv[1]) : 1e9);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
`

const goSource = `package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

var sink uint64

//go:noinline
func hotFunction(n uint64) uint64 {
	var x uint64
	for i := uint64(0); i < n; i++ {
		x += i * i
	}
	return x
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	secs := 1e9
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Duration(secs * float64(time.Second))
	for cpuTime() < end {
		sink += hotFunction(2000000)
	}
	fmt.Println("done")
	select {}
}
`

// BuildC compiles the C workload into dir as name, with frame pointers and
// symbols; strip removes them.
func BuildC(t testing.TB, dir, name string, strip bool) string {
	t.Helper()
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(cSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := []string{"-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o", out, src}
	if strip {
		args = append([]string{"-s"}, args...)
	}
	testenv.Run(t, dir, nil, "cc", args...)
	return out
}

// BuildGo compiles the Go workload into dir as name; strip drops the symbol
// table (the pclntab stays). ldflags are added to the linker's.
func BuildGo(t testing.TB, dir, name string, strip bool, ldflags ...string) string {
	t.Helper()
	src := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module workload\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(goSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if strip {
		ldflags = append(ldflags, "-s", "-w")
	}
	if len(ldflags) > 0 {
		args = append(args, "-ldflags="+strings.Join(ldflags, " "))
	}
	testenv.Run(t, src, []string{"GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0"}, "go", append(args, ".")...)
	return out
}

// Process is a running workload.
type Process struct {
	Cmd  *exec.Cmd
	PID  int
	done chan struct{}
}

// Start runs exe spinning for spin seconds of its own CPU time (0: forever);
// the process is killed when the test ends.
func Start(t testing.TB, exe string, spin time.Duration) *Process {
	t.Helper()
	arg := "1e9"
	if spin > 0 {
		arg = fmt.Sprintf("%.3f", spin.Seconds())
	}
	return StartArgs(t, exe, arg)
}

// StartArgs runs exe with args, a program that prints "done" (see Wait);
// the process is killed when the test ends.
func StartArgs(t testing.TB, exe string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(exe, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	p := &Process{Cmd: cmd, PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "done" {
				close(p.done)
			}
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return p
}

// Wait blocks until the workload finished spinning, or fails t after timeout.
func (p *Process) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("workload %d did not finish spinning within %s", p.PID, timeout)
	}
}
