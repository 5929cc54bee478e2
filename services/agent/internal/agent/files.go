package agent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// Errors of reading a mapped file, checked with errors.Is.
var (
	// ErrFileTimeout: the read did not finish in time (a FUSE or network
	// file system that does not answer); it goes on without the tick.
	ErrFileTimeout = errors.New("file read timed out")
	// ErrFilesStuck: too many earlier reads are still blocked.
	ErrFilesStuck = errors.New("too many file reads blocked")
	// ErrSlowDevice: a read on this device timed out recently.
	ErrSlowDevice = errors.New("device recently timed out")
	// ErrFileChanged: the file is not the content whose build ID was read.
	ErrFileChanged = errors.New("file changed since its build ID was read")
)

// fileGate runs the reads of other processes' files off the tick goroutine.
// Opening with O_PATH|O_NONBLOCK does not wait for a FIFO's writer, but a
// FUSE or NFS server that never answers blocks even a stat, and a process
// stuck in a page fault on such a file blocks readers of its maps and
// environ: such a read is left behind after timeout, its device (or the
// process, "pid:N") skipped for slowFor, and at most maxStuck reads may be
// left behind at once.
type fileGate struct {
	timeout  time.Duration
	slowFor  time.Duration
	maxStuck int64
	now      func() time.Time

	stuck    atomic.Int64
	slowDevs map[string]time.Time // device -> until when it is skipped; tick goroutine only
}

func newFileGate(timeout time.Duration, now func() time.Time) *fileGate {
	return &fileGate{timeout: timeout, slowFor: 10 * time.Minute, maxStuck: 2, now: now, slowDevs: map[string]time.Time{}}
}

// do runs fn for a file on dev and waits at most the gate's timeout. fn must
// touch no state shared with the caller (use gated to get a result).
func (g *fileGate) do(dev string, fn func()) error {
	if until, ok := g.slowDevs[dev]; ok {
		if g.now().Before(until) {
			return fmt.Errorf("%w: %s", ErrSlowDevice, dev)
		}
		delete(g.slowDevs, dev)
	}
	if g.stuck.Load() >= g.maxStuck {
		return ErrFilesStuck
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		g.stuck.Add(1)
		go func() {
			<-done
			g.stuck.Add(-1)
		}()
		if len(g.slowDevs) >= maxSlowKeys {
			g.pruneSlow()
		}
		g.slowDevs[dev] = g.now().Add(g.slowFor)
		return fmt.Errorf("%w after %s on device %s", ErrFileTimeout, g.timeout, dev)
	}
}

// gated runs fn through g and returns its result. The result travels through
// a channel, not a shared variable: a read left behind after the time-out
// may still finish, and must write nothing the caller reads.
func gated[T any](g *fileGate, key string, fn func() T) (T, error) {
	ch := make(chan T, 1)
	if err := g.do(key, func() { ch <- fn() }); err != nil {
		var zero T
		return zero, err
	}
	return <-ch, nil
}

// maxSlowKeys bounds the devices and processes remembered as slow.
const maxSlowKeys = 1024

// pruneSlow forgets the keys whose pause is over, or all of them when none is.
func (g *fileGate) pruneSlow() {
	now := g.now()
	for k, until := range g.slowDevs {
		if !now.Before(until) {
			delete(g.slowDevs, k)
		}
	}
	if len(g.slowDevs) >= maxSlowKeys {
		clear(g.slowDevs)
	}
}

// inspection is what identify learned about a mapped file.
type inspection struct {
	id      proc.FileID
	buildID string
	read    bool // the build ID was read (the file was not the cached one)
	err     error
}

// identify opens the file of mapping m of pid, checked (proc.OpenMapped),
// and reads its build ID from that descriptor unless it is still the content
// cached (same FileID).
func identify(fs proc.FS, pid int, m proc.Mapping, mapFiles bool, cached *proc.FileID) (out inspection) {
	if cached != nil {
		// A stat alone tells whether the cached content is still there.
		if id, err := fs.StatMapped(pid, m, mapFiles); err == nil && id == *cached {
			return inspection{id: id}
		}
	}
	mf, err := fs.OpenMapped(pid, m, mapFiles)
	if err != nil {
		return inspection{err: err}
	}
	defer mf.Close()
	out.id = mf.ID
	out.read = true
	f, err := mf.Open()
	if err != nil {
		out.err = err
		return out
	}
	defer f.Close()
	ef, err := elfinfo.Open(f, mf.ID.Size)
	if err != nil {
		out.err = err
		return out
	}
	out.buildID, out.err = elfinfo.BuildID(ef)
	return out
}

// extract reads the debuginfo of b from the newest process mapping it: the
// file must still be the one whose build ID b holds (device and inode; its
// ctime changes when it is merely unlinked), and the build ID read with the
// symbols, from the same descriptor, must be b's.
func extract(fs proc.FS, b binary, mapFiles bool, lim elfinfo.Limits) (*debuginfo.File, error) {
	mf, err := fs.OpenMapped(b.pid, b.mapping, mapFiles)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	if mf.ID.Dev != b.id.Dev || mf.ID.Inode != b.id.Inode {
		return nil, fmt.Errorf("%w: %s", ErrFileChanged, b.path)
	}
	f, err := mf.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elfinfo.Open(f, mf.ID.Size)
	if err != nil {
		return nil, err
	}
	// Before anything is published for b's build ID, even a too-large
	// marker, the file read must be the one that has it.
	if id, err := elfinfo.BuildID(ef); err != nil || id != b.buildID {
		return nil, fmt.Errorf("%w: %s has build ID %q now (%v), %s before", ErrFileChanged, b.path, id, err, b.buildID)
	}
	d, err := elfinfo.ExtractFile(ef, lim)
	if err != nil {
		return nil, err
	}
	if d.BuildID != b.buildID {
		return nil, fmt.Errorf("%w: %s has build ID %s now, %s before", ErrFileChanged, b.path, d.BuildID, b.buildID)
	}
	return d, nil
}
