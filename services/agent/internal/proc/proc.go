// Package proc reads what the agent needs to know about a process from /proc:
// its identity labels, executable mappings, RSS and cgroup, and decides which
// processes are targeted.
package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// FS reads a proc file system mounted at Root ("/proc" on a host; a fake tree
// in tests).
type FS struct {
	Root string
}

// Info is the identity of a process.
type Info struct {
	PID        int
	StartTime  uint64 // clock ticks after boot: with PID, identifies a process
	Comm       string
	Executable string // path of /proc/PID/exe, "" for kernel threads
	Cgroup     Cgroup
	K8sPod     string
	K8sNS      string
}

func (fs FS) path(pid int, name string) string {
	return filepath.Join(fs.Root, strconv.Itoa(pid), name)
}

// ErrGone is returned when the process exited.
var ErrGone = errors.New("process gone")

// ErrTooLarge is returned for a /proc file over its bound.
var ErrTooLarge = errors.New("proc file too large")

// Bounds on what is read from another process's /proc files. The process
// controls their size: its environment (up to a quarter of its stack limit),
// its number of mappings (vm.max_map_count, 65530 by default, can be raised),
// the depth of its cgroup path.
const (
	MaxStatBytes    = 4 << 10  // /proc/PID/stat and statm: a 16-byte comm and numbers
	MaxCgroupBytes  = 64 << 10 // /proc/PID/cgroup: one path per hierarchy
	MaxEnvironBytes = 1 << 20  // /proc/PID/environ: read up to here, the rest ignored
	// /proc/PID/maps is read line by line, never whole.
	MaxMapsLineBytes = 8 << 10 // the kernel prints at most a page of path
	MaxMapsLines     = 1 << 17 // twice the default vm.max_map_count
	MaxExecMappings  = 8192    // executable mappings kept per process
)

// open opens a /proc file of pid, mapping a process that is gone to ErrGone.
// The file is read with plain system calls: an *os.File would try to add it
// to the runtime's poller and set its flags, three more calls per file, and
// under process churn the agent reads hundreds a second.
func (fs FS) open(pid int, name string) (*procFile, error) {
	path := fs.path(pid, name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err == unix.ENOENT || err == unix.ESRCH {
		return nil, fmt.Errorf("read %s of pid %d: %w", name, pid, ErrGone)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &procFile{fd: fd}, nil
}

// procFile is an open /proc file.
type procFile struct{ fd int }

func (f *procFile) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := unix.Read(f.fd, b)
	for err == unix.EINTR {
		n, err = unix.Read(f.fd, b)
	}
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (f *procFile) Close() error { return unix.Close(f.fd) }

// read reads a /proc file of pid of at most max bytes; a larger one is
// ErrTooLarge, unless truncate: then its first max bytes are returned.
func (fs FS) read(pid int, name string, max int64, truncate bool) ([]byte, error) {
	f, err := fs.open(pid, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if errors.Is(err, errSearch) {
		return nil, fmt.Errorf("read %s of pid %d: %w", name, pid, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of pid %d: %w", name, pid, err)
	}
	if int64(len(b)) > max {
		if !truncate {
			return nil, fmt.Errorf("read %s of pid %d: %w: over %d bytes", name, pid, ErrTooLarge, max)
		}
		b = b[:max]
	}
	return b, nil
}

// errSearch matches the ESRCH some /proc files return once a process is a zombie.
var errSearch = syscall.ESRCH

// Stat is the part of /proc/PID/stat the agent uses.
type Stat struct {
	Comm      string
	UTime     uint64 // clock ticks
	STime     uint64
	StartTime uint64
	RSSPages  int64
}

// ReadStat parses /proc/PID/stat.
func (fs FS) ReadStat(pid int) (Stat, error) {
	b, err := fs.read(pid, "stat", MaxStatBytes, false)
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses the content of /proc/PID/stat. comm may contain spaces and
// parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("parse stat: no comm in %q", truncate(b))
	}
	fields := strings.Fields(string(b[end+1:]))
	// fields[0] is state (field 3); utime is field 14, stime 15, starttime 22, rss 24.
	if len(fields) < 22 {
		return Stat{}, fmt.Errorf("parse stat: %d fields after comm, want at least 22", len(fields))
	}
	var s Stat
	s.Comm = string(b[open+1 : end])
	var err error
	if s.UTime, err = strconv.ParseUint(fields[11], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat utime: %w", err)
	}
	if s.STime, err = strconv.ParseUint(fields[12], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat stime: %w", err)
	}
	if s.StartTime, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat starttime: %w", err)
	}
	if s.RSSPages, err = strconv.ParseInt(fields[21], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse stat rss: %w", err)
	}
	return s, nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// ReadInfo reads the identity of pid.
func (fs FS) ReadInfo(pid int) (Info, error) {
	st, err := fs.ReadStat(pid)
	if err != nil {
		return Info{}, err
	}
	info := Info{PID: pid, StartTime: st.StartTime, Comm: st.Comm}
	if exe, err := os.Readlink(fs.path(pid, "exe")); err == nil {
		info.Executable = strings.TrimSuffix(exe, " (deleted)")
	}
	if b, err := fs.read(pid, "cgroup", MaxCgroupBytes, false); err == nil {
		info.Cgroup = ParseCgroup(string(b))
	}
	if info.Cgroup.K8sPodUID != "" {
		// Without the API server, the pod name is the container's hostname and
		// the namespace is known only when the pod exports it.
		if env, err := fs.read(pid, "environ", MaxEnvironBytes, true); err == nil {
			// Only whole entries: one cut at the bound is not a value.
			if i := bytes.LastIndexByte(env, 0); i >= 0 {
				env = env[:i]
			} else {
				env = nil
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				k, v, _ := strings.Cut(string(kv), "=")
				switch k {
				case "HOSTNAME":
					info.K8sPod = v
				case "POD_NAMESPACE", "KUBERNETES_NAMESPACE":
					info.K8sNS = v
				}
			}
		}
	}
	return info, nil
}

// PIDs lists the processes (not threads) in the proc tree.
func (fs FS) PIDs() ([]int, error) {
	ents, err := os.ReadDir(fs.Root)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", fs.Root, err)
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// RSSBytes reads the resident set size of pid from /proc/PID/statm.
func (fs FS) RSSBytes(pid int) (int64, error) {
	b, err := fs.read(pid, "statm", MaxStatBytes, false)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("parse statm of pid %d: %q", pid, truncate(b))
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse statm of pid %d: %w", pid, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// Mapping is one file-backed executable mapping of /proc/PID/maps.
type Mapping struct {
	Start, Limit, Offset uint64
	Dev                  string // major:minor as printed by the kernel
	Inode                uint64
	Path                 string
}

// ReadMaps returns the executable mappings of pid, reading its maps line by
// line within the Max* bounds. Past a bound it returns the mappings read
// until then with an error wrapping ErrTooLarge.
func (fs FS) ReadMaps(pid int) ([]Mapping, error) {
	f, err := fs.open(pid, "maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	maps, err := parseMaps(f)
	if errors.Is(err, errSearch) {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, ErrGone)
	}
	return maps, err
}

// ParseMaps parses /proc/PID/maps and keeps executable mappings, including
// anonymous ones (JIT code), which have no path.
func ParseMaps(b []byte) ([]Mapping, error) { return parseMaps(bytes.NewReader(b)) }

func parseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxMapsLineBytes)
	lines := 0
	for sc.Scan() {
		if lines++; lines > MaxMapsLines {
			return out, fmt.Errorf("parse maps: %w: more than %d lines", ErrTooLarge, MaxMapsLines)
		}
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("parse maps: short line %q", sc.Text())
		}
		if len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("parse maps: bad range %q", f[0])
		}
		var m Mapping
		var err error
		if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps start %q: %w", lo, err)
		}
		if m.Limit, err = strconv.ParseUint(hi, 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps end %q: %w", hi, err)
		}
		if m.Offset, err = strconv.ParseUint(f[2], 16, 64); err != nil {
			return nil, fmt.Errorf("parse maps offset %q: %w", f[2], err)
		}
		if len(out) == MaxExecMappings {
			return out, fmt.Errorf("parse maps: %w: more than %d executable mappings", ErrTooLarge, MaxExecMappings)
		}
		m.Dev = f[3]
		if m.Inode, err = strconv.ParseUint(f[4], 10, 64); err != nil {
			return nil, fmt.Errorf("parse maps inode %q: %w", f[4], err)
		}
		if len(f) >= 6 {
			m.Path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return out, fmt.Errorf("parse maps: %w: a line over %d bytes", ErrTooLarge, MaxMapsLineBytes)
	} else if err != nil {
		return nil, fmt.Errorf("parse maps: %w", err)
	}
	return out, nil
}
