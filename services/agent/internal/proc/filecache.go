package proc

import (
	"io"
	"sync"
)

// FileCache keeps what was read of each mapped file by its identity, so a
// binary that many processes map (an interpreter, libjvm.so) is read once,
// not at every registration. A read error is kept too: a file that does not
// parse is not read again until it changes. At most max files are kept;
// past that the cache starts over (a host runs few such binaries).
type FileCache[T any] struct {
	max  int
	read func(r io.ReaderAt, size int64) (T, error)

	mu    sync.Mutex
	files map[FileID]fileResult[T]
}

type fileResult[T any] struct {
	v   T
	err error
}

// NewFileCache returns a cache of at most max files, each read by read.
func NewFileCache[T any](max int, read func(r io.ReaderAt, size int64) (T, error)) *FileCache[T] {
	return &FileCache[T]{max: max, read: read, files: map[FileID]fileResult[T]{}}
}

// Get returns what read made of the file of mapping m of pid (found as
// OpenMapped finds it), reading the file only when its identity is new.
func (c *FileCache[T]) Get(fs FS, pid int, m Mapping, useMapFiles bool) (T, error) {
	var zero T
	mf, err := fs.OpenMapped(pid, m, useMapFiles)
	if err != nil {
		return zero, err
	}
	defer mf.Close()
	c.mu.Lock()
	r, ok := c.files[mf.ID]
	c.mu.Unlock()
	if ok {
		return r.v, r.err
	}
	f, err := mf.Open()
	if err != nil {
		return zero, err
	}
	defer f.Close()
	r.v, r.err = c.read(f, mf.ID.Size)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.files) >= c.max {
		clear(c.files)
	}
	c.files[mf.ID] = r
	return r.v, r.err
}
