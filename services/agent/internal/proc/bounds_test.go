package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

const kubepodsCgroup = "0::/kubepods.slice/kubepods-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice/cri-containerd-" +
	"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd.scope\n"

// TestReadBounds gives processes of a fake /proc tree files larger than the
// agent reads: each is refused or cut at its bound, never read whole.
func TestReadBounds(t *testing.T) {
	fs := fakeProc(t, map[string]string{
		"10": kubepodsCgroup, // HOSTNAME before the environ bound
		"11": kubepodsCgroup, // HOSTNAME after it
		"12": kubepodsCgroup, // the bound cuts HOSTNAME's value
		"13": "0::/" + strings.Repeat("a/", MaxCgroupBytes) + "x.service\n",
		"14": "0::/\n",
	})
	write := func(pid, name string, b []byte) {
		if err := os.WriteFile(filepath.Join(fs.Root, pid, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pad := func(n int) []byte { return append(bytes.Repeat([]byte("P"), n), 0) }
	write("10", "environ", append([]byte("HOSTNAME=pod-a\x00"), pad(2*MaxEnvironBytes)...))
	write("11", "environ", append(pad(MaxEnvironBytes), "HOSTNAME=pod-b\x00"...))
	write("12", "environ", append(pad(MaxEnvironBytes-len("x\x00HOSTNAME=po")), "HOSTNAME=pod-c\x00"...))
	write("14", "stat", append([]byte("14 (x) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 4242 0 100 0 "), bytes.Repeat([]byte("0 "), MaxStatBytes)...))

	for _, c := range []struct {
		pid     int
		wantPod string
	}{{10, "pod-a"}, {11, ""}, {12, ""}} {
		info, err := fs.ReadInfo(c.pid)
		if err != nil {
			t.Fatal(err)
		}
		if info.K8sPod != c.wantPod {
			t.Errorf("pid %d: pod %q, want %q", c.pid, info.K8sPod, c.wantPod)
		}
	}
	if info, err := fs.ReadInfo(13); err != nil || info.Cgroup.Path != "" {
		t.Errorf("cgroup file over %d bytes: path of %d bytes, %v; want it unread", MaxCgroupBytes, len(info.Cgroup.Path), err)
	}
	if _, err := fs.ReadStat(14); !errors.Is(err, ErrTooLarge) {
		t.Errorf("stat over %d bytes: %v, want ErrTooLarge", MaxStatBytes, err)
	}
}

func TestParseMapsBounds(t *testing.T) {
	line := func(i int, perms, path string) string {
		return fmt.Sprintf("%x-%x %s 00000000 fd:01 %d %s\n", 0x10000+i*0x2000, 0x11000+i*0x2000, perms, 100+i, path)
	}
	var many strings.Builder
	for i := range MaxExecMappings + 10 {
		many.WriteString(line(i, "r-xp", "/lib/x.so"))
	}
	var lines strings.Builder
	for i := range MaxMapsLines + 1 {
		lines.WriteString(line(i, "r--p", "/lib/x.so"))
	}
	for _, c := range []struct {
		name string
		in   string
		keep int
	}{
		{"too many executable mappings", many.String(), MaxExecMappings},
		{"too many lines", line(0, "r-xp", "/bin/a") + lines.String(), 1},
		{"line too long", line(0, "r-xp", "/bin/a") + line(1, "r-xp", "/"+strings.Repeat("a", MaxMapsLineBytes)), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseMaps([]byte(c.in))
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("ParseMaps: %v, want ErrTooLarge", err)
			}
			if len(got) != c.keep {
				t.Fatalf("kept %d mappings, want the first %d", len(got), c.keep)
			}
		})
	}
}

// manyMapsSource maps its own executable's first page executable n times at
// separate addresses, so /proc/PID/maps lists n+ executable mappings.
const manyMapsSource = `#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int n = atoi(argv[1]);
	int fd = open("/proc/self/exe", O_RDONLY);
	for (int i = 0; i < n; i++) {
		/* A gap page between mappings keeps the kernel from merging them. */
		void *at = (void *)(0x100000000000UL + (unsigned long)i * 0x2000);
		if (mmap(at, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, 0) == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
	}
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
`

// TestReadMapsBoundRealProcess reads the maps of a process with more
// executable mappings than the bound: the first MaxExecMappings are kept,
// with ErrTooLarge.
func TestReadMapsBoundRealProcess(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "manymaps.c")
	if err := os.WriteFile(src, []byte(manyMapsSource), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "manymaps")
	testenv.Run(t, dir, nil, "cc", "-O1", "-o", exe, src)
	n := MaxExecMappings + 100
	p := workload.StartArgs(t, exe, fmt.Sprint(n))
	p.Wait(t, 60*time.Second)
	got, err := FS{Root: "/proc"}.ReadMaps(p.PID)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadMaps of %d executable mappings: %v, want ErrTooLarge", n, err)
	}
	if len(got) != MaxExecMappings {
		t.Fatalf("kept %d mappings, want %d", len(got), MaxExecMappings)
	}
	if got[0].Path != exe {
		t.Fatalf("first mapping %+v, want the executable %s", got[0], exe)
	}
}
