package service

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// noLimit is where a cgroup's memory limit means "none": cgroup v1 writes
// the largest page-aligned int64 (9223372036854771712), v2 writes "max".
const noLimit = 1 << 60

// maxLimitFile bounds what is read of a cgroup file: one number.
const maxLimitFile = 64

// MemoryLimit is the memory limit of this process's cgroup: the smallest
// limit of its cgroup and of the cgroups above it (cgroup v2 memory.max, or
// cgroup v1 memory.limit_in_bytes), as a container runtime or a systemd
// MemoryMax= sets it. ok is false when no limit is set or none can be read
// (no cgroup file system).
func MemoryLimit() (limit int64, ok bool) {
	self, err := readBounded("/proc/self/cgroup", 64<<10)
	if err != nil {
		return 0, false
	}
	return memoryLimit(self, "/sys/fs/cgroup")
}

// memoryLimit finds the limit of the cgroup /proc/self/cgroup (self) names
// under the cgroup file systems mounted at root. cgroup v1's memory
// controller wins over a v2 path: on a hybrid host the v2 hierarchy holds no
// memory controller.
func memoryLimit(self []byte, root string) (int64, bool) {
	var v1, v2 string
	haveV1, haveV2 := false, false
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1, haveV1 = parts[2], true
			}
		}
	}
	switch {
	case haveV1:
		return smallestLimit(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes")
	case haveV2:
		return smallestLimit(root, v2, "memory.max")
	}
	return 0, false
}

// smallestLimit reads file in the cgroup at dir under mount and in each
// cgroup above it, and returns the smallest limit set.
func smallestLimit(mount, dir, file string) (int64, bool) {
	best, found := int64(0), false
	for d := path.Clean("/" + dir); ; d = path.Dir(d) {
		if b, err := readBounded(filepath.Join(mount, d, file), maxLimitFile); err == nil {
			s := strings.TrimSpace(string(b))
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < noLimit && (!found || n < best) {
				best, found = n, true
			}
		}
		if d == "/" {
			return best, found
		}
	}
}

// MemoryTotal is the host's memory (MemTotal of /proc/meminfo) in bytes; ok
// is false when it cannot be read.
func MemoryTotal() (total int64, ok bool) {
	b, err := readBounded("/proc/meminfo", 64<<10)
	if err != nil {
		return 0, false
	}
	return memTotal(b)
}

// memTotal finds the line "MemTotal: <n> kB" of a /proc/meminfo.
func memTotal(meminfo []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n <= 0 || n > noLimit>>10 {
			return 0, false
		}
		return n << 10, true
	}
	return 0, false
}

// readBounded reads at most max bytes of name.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}
