package service

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryLimitFiles(t *testing.T) {
	root := t.TempDir()
	// cgroup v2: a pod's limit above its container's "max".
	writeFile(t, root+"/v2/kubepods/pod1/memory.max", "1073741824\n")
	writeFile(t, root+"/v2/kubepods/pod1/ctr/memory.max", "max\n")
	writeFile(t, root+"/v2/memory.max", "max\n")
	// cgroup v1: the unit's own limit below its slice's.
	writeFile(t, root+"/v1/memory/system.slice/memory.limit_in_bytes", "2147483648\n")
	writeFile(t, root+"/v1/memory/system.slice/rollup.service/memory.limit_in_bytes", "536870912\n")
	writeFile(t, root+"/v1/memory/memory.limit_in_bytes", "9223372036854771712\n")
	// A namespaced container sees its own cgroup as the root.
	writeFile(t, root+"/ns/memory.max", "268435456\n")
	writeFile(t, root+"/none/memory/memory.limit_in_bytes", "9223372036854771712\n")
	writeFile(t, root+"/bad/memory.max", "lots\n")

	for _, c := range []struct {
		name, root, self string
		want             int64
		ok               bool
	}{
		{"v2 ancestor", root + "/v2", "0::/kubepods/pod1/ctr\n", 1 << 30, true},
		{"v1 own limit", root + "/v1", "12:pids:/system.slice/rollup.service\n4:memory:/system.slice/rollup.service\n0::/system.slice/rollup.service\n", 512 << 20, true},
		{"namespaced root", root + "/ns", "0::/\n", 256 << 20, true},
		{"v1 unlimited", root + "/none", "4:memory:/\n", 0, false},
		{"not a number", root + "/bad", "0::/\n", 0, false},
		{"no cgroup files", root + "/missing", "0::/a/b\n", 0, false},
		{"garbage", root + "/v2", "nonsense\n\n::\n", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := memoryLimit([]byte(c.self), c.root)
			if got != c.want || ok != c.ok {
				t.Fatalf("memoryLimit = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestMemoryTotal(t *testing.T) {
	for _, c := range []struct {
		name, meminfo string
		want          int64
		ok            bool
	}{
		{"meminfo", "MemTotal:       24563616 kB\nMemFree:         1000 kB\n", 24563616 << 10, true},
		{"not first", "Foo: 1 kB\nMemTotal: 2048 kB\n", 2 << 20, true},
		{"no unit", "MemTotal: 2048\n", 0, false},
		{"not a number", "MemTotal: lots kB\n", 0, false},
		{"negative", "MemTotal: -5 kB\n", 0, false},
		{"overflows", "MemTotal: 9223372036854775807 kB\n", 0, false},
		{"missing", "MemFree: 5 kB\n", 0, false},
	} {
		got, ok := memTotal([]byte(c.meminfo))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: memTotal = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	// This kernel's.
	if n, ok := MemoryTotal(); !ok || n < 64<<20 {
		t.Fatalf("MemoryTotal = %d, %v", n, ok)
	}
}

// TestMemoryLimitKernel runs a process in a new cgroup of this kernel with
// a 384 MiB limit and checks the limit it reads (root: it creates cgroups).
func TestMemoryLimitKernel(t *testing.T) {
	if os.Getenv("STACKSTREAM_PRINT_MEMORY_LIMIT") != "" {
		limit, ok := MemoryLimit()
		fmt.Printf("limit=%d ok=%v\n", limit, ok)
		return
	}
	dir, file := kernelCgroup(t)
	const limit = 384 << 20
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatalf("set the test cgroup's limit: %v", err)
	}
	// The child joins the cgroup before it runs the test binary, so it
	// reads its limit from the start.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^TestMemoryLimitKernel$'`, "sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), "STACKSTREAM_PRINT_MEMORY_LIMIT=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("limit=%d ok=true", limit); !strings.Contains(string(out), want) {
		t.Fatalf("child printed %q, want %q", out, want)
	}
}

// kernelCgroup makes a child cgroup of this process's memory cgroup (v1's
// memory controller, else v2) and returns it with its limit file name.
func kernelCgroup(t *testing.T) (dir, file string) {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		missing(t, "no /proc/self/cgroup: %v", err)
	}
	var v1, v2 string
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		} else if strings.Contains(","+parts[1]+",", ",memory,") {
			v1 = parts[2]
		}
	}
	var parent string
	switch {
	case v1 != "":
		parent, file = filepath.Join("/sys/fs/cgroup/memory", v1), "memory.limit_in_bytes"
	case v2 != "":
		parent, file = filepath.Join("/sys/fs/cgroup", v2), "memory.max"
	default:
		missing(t, "no memory cgroup in %q", self)
	}
	dir = filepath.Join(parent, fmt.Sprintf("stackstream-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		missing(t, "cannot create a cgroup (root and a writable cgroup file system needed): %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir, file
}

// missing skips, or fails when CI=true (the kernel and root are there).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
