// Package javaattach asks a running HotSpot JVM, through its dynamic attach
// mechanism, to run a diagnostic command (Compiler.perfmap: write
// /tmp/perf-PID.map), so its JIT-compiled methods can be named without any
// JVM flag.
//
// The protocol, as HotSpot on Linux implements it: the attach listener is
// started lazily; a client creates the file .attach_PID (PID as the JVM
// sees it) in the JVM's working directory or /tmp, owned by the JVM's
// effective user (or root in its user namespace), and sends SIGQUIT. The
// JVM then listens on the UNIX socket /tmp/.java_pidPID (mode 0600) and
// accepts a client only when the peer's credentials (SO_PEERCRED) are its
// effective uid and gid, or uid 0 in its namespace. A request is
// "1\0<command>\0<arg0>\0<arg1>\0<arg2>\0"; the answer is the result code
// on a line, then the command's output.
package javaattach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// Errors, checked with errors.Is.
var (
	// ErrNoHandler: the process does not handle SIGQUIT (-Xrs, or not a
	// JVM): signalling it would kill it or do nothing.
	ErrNoHandler = errors.New("process has no SIGQUIT handler")
	// ErrNoListener: no attach socket appeared after the signal (attach
	// disabled, -XX:+DisableAttachMechanism, or a JVM too busy to answer).
	ErrNoListener = errors.New("no attach listener")
	// ErrCommand: the JVM answered with a non-zero result.
	ErrCommand = errors.New("attach command failed")
	// ErrReplaced: the PID now belongs to another process.
	ErrReplaced = errors.New("process replaced")
)

// Target is the JVM to attach to, as the agent read it from /proc.
type Target struct {
	PID       int    // in the agent's namespace
	StartTime uint64 // from /proc/PID/stat: the PID must still be this process
	Status    proc.Status
}

// Options of one attach.
type Options struct {
	ProcRoot string        // "/proc"
	Wait     time.Duration // how long to wait for the listener after the signal
	Timeout  time.Duration // for the connection (write the request, read the answer)
	Poll     time.Duration // how often the socket is looked for
}

// maxReply bounds what is read of the answer.
const maxReply = 64 << 10

// PerfMap asks the JVM to write its perf map; it returns the command's
// output.
func PerfMap(ctx context.Context, t Target, o Options) (string, error) {
	return Command(ctx, t, o, "jcmd", "Compiler.perfmap")
}

// Command runs an attach operation with up to three arguments.
func Command(ctx context.Context, t Target, o Options, cmd string, args ...string) (string, error) {
	if len(args) > 3 {
		return "", fmt.Errorf("attach %s: %d arguments, at most 3", cmd, len(args))
	}
	fs := proc.FS{Root: o.ProcRoot}
	nspid := strconv.Itoa(t.Status.NSPid)
	euid, egid := t.Status.UIDs[1], t.Status.GIDs[1]
	root := filepath.Join(o.ProcRoot, strconv.Itoa(t.PID), "root")
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open root of pid %d: %w", t.PID, err)
	}
	defer unix.Close(rootFD)
	tmp, err := openInRoot(rootFD, "tmp", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", fmt.Errorf("open /tmp of pid %d: %w", t.PID, err)
	}
	defer unix.Close(tmp)

	sockName := ".java_pid" + nspid
	sock, err := openSocket(tmp, sockName, euid)
	if err != nil {
		if !t.Status.Catches(unix.SIGQUIT) {
			return "", fmt.Errorf("attach to pid %d: %w", t.PID, ErrNoHandler)
		}
		if sock, err = trigger(ctx, fs, t, tmp, ".attach_pid"+nspid, sockName, euid, egid, o); err != nil {
			return "", err
		}
	}
	defer unix.Close(sock)
	conn, err := connectAs(sock, euid, egid)
	if err != nil {
		return "", fmt.Errorf("connect to the attach socket of pid %d: %w", t.PID, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(o.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	req := "1\x00" + cmd + "\x00"
	for i := range 3 {
		if i < len(args) {
			req += args[i]
		}
		req += "\x00"
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		return "", fmt.Errorf("write attach request to pid %d: %w", t.PID, err)
	}
	reply, err := io.ReadAll(io.LimitReader(conn, maxReply))
	if err != nil {
		return "", fmt.Errorf("read attach reply of pid %d: %w", t.PID, err)
	}
	code, out, _ := strings.Cut(string(reply), "\n")
	if strings.TrimSpace(code) != "0" {
		return out, fmt.Errorf("%w: pid %d answered %q: %.200s", ErrCommand, t.PID, code, out)
	}
	return out, nil
}

// openInRoot opens name under dir without following any symlink and
// without leaving dir's tree.
func openInRoot(dir int, name string, flags int) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// openSocket opens the attach socket O_PATH and checks it is a socket of
// the JVM's user (as the JVM makes it): a file planted by someone else is
// not talked to.
func openSocket(tmp int, name string, euid uint32) (int, error) {
	fd, err := openInRoot(tmp, name, unix.O_PATH)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != euid {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a socket of uid %d (mode %#o, uid %d)", name, euid, st.Mode&unix.S_IFMT, st.Uid)
	}
	return fd, nil
}

// trigger creates the attach file, signals the JVM and waits for its
// socket; the file it created is removed again.
func trigger(ctx context.Context, fs proc.FS, t Target, tmp int, fileName, sockName string, euid, egid uint32, o Options) (int, error) {
	fd, err := unix.Openat(tmp, fileName, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	created := err == nil
	switch {
	case created:
		// The JVM starts its listener only for a file of its own user (or
		// of root in its user namespace, which the agent's root may not be).
		err = unix.Fchown(fd, int(euid), int(egid))
		unix.Close(fd)
		if err != nil {
			unix.Unlinkat(tmp, fileName, 0)
			return -1, fmt.Errorf("chown the attach file of pid %d: %w", t.PID, err)
		}
		defer unix.Unlinkat(tmp, fileName, 0)
	case errors.Is(err, unix.EEXIST):
		// Another client is attaching; its file serves as well.
	default:
		return -1, fmt.Errorf("create the attach file of pid %d: %w", t.PID, err)
	}
	if err := signal(fs, t, unix.SIGQUIT); err != nil {
		return -1, err
	}
	deadline := time.Now().Add(o.Wait)
	for {
		if sock, err := openSocket(tmp, sockName, euid); err == nil {
			return sock, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("attach to pid %d: %w after %s", t.PID, ErrNoListener, o.Wait)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

// signal sends sig through a pidfd, after checking the PID is still the
// process the agent read: a PID reused since must not get it.
func signal(fs proc.FS, t Target, sig unix.Signal) error {
	pfd, err := unix.PidfdOpen(t.PID, 0)
	if err != nil {
		return fmt.Errorf("open pidfd of pid %d: %w", t.PID, err)
	}
	defer unix.Close(pfd)
	if st, err := fs.ReadStat(t.PID); err != nil || st.StartTime != t.StartTime {
		return fmt.Errorf("signal pid %d: %w", t.PID, ErrReplaced)
	}
	if err := unix.PidfdSendSignal(pfd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal pid %d: %w", t.PID, err)
	}
	return nil
}

// connectAs connects to the socket held by the O_PATH descriptor sock with
// the JVM's effective uid and gid, which its SO_PEERCRED check wants (root
// outside a user namespace is not root inside it). The credentials are
// changed on one locked OS thread only, with the raw system calls (Go's
// Setresuid would change every thread), and that thread is never given
// back: the goroutine ends locked, so the runtime terminates the thread.
func connectAs(sock int, uid, gid uint32) (*os.File, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: this thread's credentials are not the agent's.
		fd, err := func() (int, error) {
			if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
				return -1, fmt.Errorf("setgroups: %w", e)
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
				return -1, fmt.Errorf("setresgid %d: %w", gid, e)
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
				return -1, fmt.Errorf("setresuid %d: %w", uid, e)
			}
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
			if err != nil {
				return -1, fmt.Errorf("socket: %w", err)
			}
			// The checked inode itself, not a path the JVM's tree controls.
			// Non-blocking: the file gets deadlines; a UNIX connect does
			// not wait, it fails (EAGAIN) when the backlog is full.
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(sock)}); err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("connect: %w", err)
			}
			return fd, nil
		}()
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	return os.NewFile(uintptr(r.fd), "attach"), nil
}
