package unwind

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
)

// DiskCache keeps compiled tables in a directory, one file per build-ID key,
// so that an agent restarted on the same host (a crash, a node's restart of
// its pod) loads the tables of the binaries it met before instead of
// compiling them again (gcc's cc1: 20-35 ms of CPU and 9 MB of garbage).
// Files are also keyed by the agent's own build ID: another agent build may
// compile other rows (a compiler fix), so it never reads the tables of this
// one. Files without a build ID are not kept: their key names a device and
// inode, not content. A file that does not decode is removed and the table
// compiled again.
type DiskCache struct {
	dir      string
	maxBytes int64
	agent    string // the build ID of the agent that writes and reads the files
}

// Limits of a cache file, checked before anything is allocated.
const (
	cacheMagic     = "SSUNWTB1"
	maxCacheLoads  = 64      // PT_LOAD headers of one file
	maxCacheKeyLen = 4 << 10 // build ID and PT_LOAD layout
	cacheSuffix    = ".tab"
)

// ErrBadCacheFile is returned by decodeTable for a file that is not a
// cached table of the key asked for.
var ErrBadCacheFile = errors.New("invalid unwind table cache file")

// OpenDiskCache returns the cache in dir (created, 0700), holding at most
// maxBytes of files: past it, the least recently used are removed.
func OpenDiskCache(dir string, maxBytes int64) (*DiskCache, error) {
	agent, err := ownBuildID()
	if err != nil {
		return nil, fmt.Errorf("unwind table cache: the agent's build ID: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create unwind table cache: %w", err)
	}
	return &DiskCache{dir: dir, maxBytes: maxBytes, agent: agent}, nil
}

// ownBuildID returns the build ID of the running executable (Go's, or GNU's).
func ownBuildID() (string, error) {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return elfinfo.BuildID(f)
}

// cacheable reports whether tables of k are kept: those of a build ID.
func cacheable(k Key) bool { return k.BuildID != "" }

func (c *DiskCache) path(k Key, arch Arch) string {
	h := sha256.New()
	h.Write([]byte(c.agent))
	h.Write([]byte{0, byte(arch)})
	h.Write([]byte(k.BuildID))
	h.Write([]byte{0})
	h.Write([]byte(k.Loads))
	return filepath.Join(c.dir, hex.EncodeToString(h.Sum(nil)[:16])+cacheSuffix)
}

// load returns the cached table of k, or nil. A nil cache has none.
func (c *DiskCache) load(k Key, lim Limits) *Table {
	if c == nil || !cacheable(k) {
		return nil
	}
	path := c.path(k, hostArch)
	b, err := readCacheFile(path, int64(lim.MaxRows)*RowBytes+int64(maxCacheKeyLen)+maxCacheLoads*24+64)
	if err != nil {
		return nil
	}
	t, err := decodeTable(b, c.agent, k, hostArch, lim)
	if err != nil {
		os.Remove(path)
		return nil
	}
	// Its time says when it was last used, for eviction.
	now := time.Now()
	os.Chtimes(path, now, now)
	return t
}

func readCacheFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = ErrBadCacheFile
	}
	return b, err
}

// store writes t as the table of k (through a temporary file and a rename,
// so a reader never sees half a file), then removes the least recently used
// files past the cache's bound.
func (c *DiskCache) store(k Key, t *Table) error {
	if c == nil || !cacheable(k) {
		return nil
	}
	b := encodeTable(c.agent, k, t)
	if int64(len(b)) > c.maxBytes {
		return nil
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("store unwind table: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("store unwind table: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path(k, t.Arch)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("store unwind table: %w", err)
	}
	return c.trim()
}

// trim removes the least recently used files until the rest fit maxBytes.
func (c *DiskCache) trim() error {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("trim unwind table cache: %w", err)
	}
	type file struct {
		name string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), cacheSuffix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{e.Name(), info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return a.used.Compare(b.used) })
	for _, f := range files {
		if total <= c.maxBytes {
			break
		}
		os.Remove(filepath.Join(c.dir, f.name))
		total -= f.size
	}
	return nil
}

// encodeTable lays out a cache file: the magic, the build ID of the agent
// that compiled it, the architecture, the key, the PT_LOAD headers, the rows
// (as in the BPF array), then a CRC-32C of everything before it.
func encodeTable(agent string, k Key, t *Table) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, 64+len(agent)+len(k.BuildID)+len(k.Loads)+24*len(t.Loads)+RowBytes*len(t.Rows))
	b = append(b, cacheMagic...)
	b = le.AppendUint32(b, uint32(len(agent)))
	b = append(b, agent...)
	b = append(b, byte(t.Arch))
	b = le.AppendUint32(b, uint32(len(k.BuildID)))
	b = append(b, k.BuildID...)
	b = le.AppendUint32(b, uint32(len(k.Loads)))
	b = append(b, k.Loads...)
	b = le.AppendUint32(b, uint32(len(t.Loads)))
	for _, l := range t.Loads {
		b = le.AppendUint64(b, l.Offset)
		b = le.AppendUint64(b, l.Vaddr)
		b = le.AppendUint64(b, l.FileSize)
	}
	b = le.AppendUint32(b, uint32(len(t.Rows)))
	for _, r := range t.Rows {
		b = le.AppendUint32(b, r.PC)
		b = append(b, byte(r.Rule), byte(r.RBP))
		b = le.AppendUint16(b, r.Offset)
	}
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeTable decodes a cache file of k's table for arch, written by the
// agent build agent: anything else, a damaged file or one over lim, is
// ErrBadCacheFile.
func decodeTable(b []byte, agent string, k Key, arch Arch, lim Limits) (*Table, error) {
	le := binary.LittleEndian
	bad := func(why string) (*Table, error) { return nil, fmt.Errorf("%w: %s", ErrBadCacheFile, why) }
	if len(b) < len(cacheMagic)+1+4 || string(b[:len(cacheMagic)]) != cacheMagic {
		return bad("no header")
	}
	body, sum := b[:len(b)-4], le.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return bad("checksum")
	}
	p := body[len(cacheMagic):]
	field := func(max int) ([]byte, bool) {
		if len(p) < 4 {
			return nil, false
		}
		n := le.Uint32(p)
		if uint64(n) > uint64(max) || uint64(n) > uint64(len(p)-4) {
			return nil, false
		}
		f := p[4 : 4+n]
		p = p[4+n:]
		return f, true
	}
	writer, ok := field(maxCacheKeyLen)
	if !ok || string(writer) != agent {
		return bad("another agent build")
	}
	if len(p) < 1 || Arch(p[0]) != arch {
		return bad("architecture")
	}
	p = p[1:]
	id, ok := field(maxCacheKeyLen)
	if !ok || string(id) != k.BuildID {
		return bad("build ID")
	}
	loads, ok := field(maxCacheKeyLen)
	if !ok || !bytes.Equal(loads, []byte(k.Loads)) {
		return bad("PT_LOAD layout")
	}
	t := &Table{Arch: arch}
	if len(p) < 4 {
		return bad("no PT_LOAD headers")
	}
	n := le.Uint32(p)
	p = p[4:]
	if n > maxCacheLoads || uint64(n)*24 > uint64(len(p)) {
		return bad("PT_LOAD headers")
	}
	for range n {
		t.Loads = append(t.Loads, Load{Offset: le.Uint64(p), Vaddr: le.Uint64(p[8:]), FileSize: le.Uint64(p[16:])})
		p = p[24:]
	}
	if len(p) < 4 {
		return bad("no rows")
	}
	n = le.Uint32(p)
	p = p[4:]
	if n == 0 || uint64(n) > uint64(lim.MaxRows) || uint64(n)*RowBytes != uint64(len(p)) {
		return bad("rows")
	}
	t.Rows = make([]Row, n)
	for i := range t.Rows {
		r := Row{PC: le.Uint32(p), Rule: Rule(p[4]), RBP: int8(p[5]), Offset: le.Uint16(p[6:])}
		if i > 0 && r.PC <= t.Rows[i-1].PC {
			return bad("rows not sorted")
		}
		t.Rows[i] = r
		p = p[RowBytes:]
	}
	return t, nil
}
