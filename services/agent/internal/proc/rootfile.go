package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotOwned: the file is not owned by the process's user, so it is not
// the process's to describe (a hard link to another user's file).
var ErrNotOwned = errors.New("file not owned by the process's user")

// Status is the part of /proc/PID/status the agent uses.
type Status struct {
	NSPid  int       // the PID as the process sees it (innermost PID namespace)
	UIDs   [4]uint32 // real, effective, saved, file system (as this reader sees them)
	GIDs   [4]uint32
	SigCgt uint64 // signals with a handler, bit n-1 for signal n
}

// MaxStatusBytes bounds /proc/PID/status (about 1.5 KiB; a comm of 64 bytes).
const MaxStatusBytes = 16 << 10

// ReadStatus parses /proc/PID/status.
func (fs FS) ReadStatus(pid int) (Status, error) {
	b, err := fs.read(pid, "status", MaxStatusBytes, false)
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(pid, string(b))
}

// ParseStatus parses the content of /proc/PID/status of pid; a kernel
// without NSpid (before 4.1) gives pid itself.
func ParseStatus(pid int, s string) (Status, error) {
	st := Status{NSPid: pid}
	var haveUID, haveGID bool
	ids := func(v string, out *[4]uint32) bool {
		f := strings.Fields(v)
		if len(f) != 4 {
			return false
		}
		for i, x := range f {
			n, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return false
			}
			out[i] = uint32(n)
		}
		return true
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "NSpid":
			f := strings.Fields(v)
			if len(f) == 0 {
				return Status{}, fmt.Errorf("parse status of pid %d: empty NSpid", pid)
			}
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil || n <= 0 {
				return Status{}, fmt.Errorf("parse status of pid %d: NSpid %q", pid, v)
			}
			st.NSPid = n
		case "Uid":
			haveUID = ids(v, &st.UIDs)
		case "Gid":
			haveGID = ids(v, &st.GIDs)
		case "SigCgt":
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return Status{}, fmt.Errorf("parse status of pid %d: SigCgt %q", pid, v)
			}
			st.SigCgt = n
		}
	}
	if !haveUID || !haveGID {
		return Status{}, fmt.Errorf("parse status of pid %d: no Uid or Gid line", pid)
	}
	return st, nil
}

// Catches reports whether the process has a handler for sig.
func (s Status) Catches(sig unix.Signal) bool {
	return sig >= 1 && sig <= 64 && s.SigCgt&(1<<(uint(sig)-1)) != 0
}

// OpenInRoot opens path as pid sees it, for reading a file the process
// wrote (a perf map): no symlink followed anywhere on the path, never
// outside the process's root, O_PATH first so nothing blocks (a FIFO) and
// no device's open runs; it must be a regular file owned by one of the
// process's user IDs (it is then reopened for reading and checked again).
func (fs FS) OpenInRoot(pid int, path string, st Status) (*os.File, error) {
	pfd, err := fs.openPathInRoot(pid, path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	var pst unix.Stat_t
	if err := unix.Fstat(pfd, &pst); err != nil {
		return nil, fmt.Errorf("stat %s of pid %d: %w", path, pid, err)
	}
	if pst.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("open %s of pid %d: %w (mode %#o)", path, pid, ErrNotRegular, pst.Mode&unix.S_IFMT)
	}
	owned := false
	for _, u := range st.UIDs {
		owned = owned || pst.Uid == u
	}
	if !owned {
		return nil, fmt.Errorf("open %s of pid %d: %w (owner %d, process %v)", path, pid, ErrNotOwned, pst.Uid, st.UIDs)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s of pid %d: %w", path, pid, err)
	}
	var rst unix.Stat_t
	if err := unix.Fstat(fd, &rst); err != nil || rst.Dev != pst.Dev || rst.Ino != pst.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("reopen %s of pid %d: %w", path, pid, ErrNotMapped)
	}
	return os.NewFile(uintptr(fd), fs.path(pid, "root")+path), nil
}
