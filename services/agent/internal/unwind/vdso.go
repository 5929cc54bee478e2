package unwind

import (
	"bytes"
	"fmt"
	"os"
	"sync"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// vdsoPath is how /proc/PID/maps names the vDSO.
const vdsoPath = "[vdso]"

// The kernel maps one vDSO image into every x86-64 process; the agent reads
// its own copy once and shares its table with every process.
var vdso struct {
	once  sync.Once
	id    proc.FileID
	size  uint64
	table *Table
	err   error
}

// vdsoTable returns the table of the vDSO, its key in the registry and its
// size.
func vdsoTable(lim Limits) (proc.FileID, uint64, *Table, error) {
	vdso.once.Do(func() {
		img, err := ownVDSO()
		if err != nil {
			vdso.err = err
			return
		}
		vdso.size = uint64(len(img))
		// No file: a key no file has (device and inode all ones).
		vdso.id = proc.FileID{Dev: ^uint64(0), Inode: ^uint64(0), Size: int64(len(img))}
		vdso.table, vdso.err = Compile(bytes.NewReader(img), int64(len(img)), lim)
	})
	return vdso.id, vdso.size, vdso.table, vdso.err
}

// ownVDSO reads the agent's own vDSO through /proc/self/mem.
func ownVDSO() ([]byte, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("read own maps: %w", err)
	}
	maps, err := proc.ParseMaps(b)
	if err != nil {
		return nil, fmt.Errorf("parse own maps: %w", err)
	}
	for _, m := range maps {
		if m.Path != vdsoPath {
			continue
		}
		if m.Limit-m.Start > 1<<20 {
			return nil, fmt.Errorf("%w: vDSO of %d bytes", ErrTooLarge, m.Limit-m.Start)
		}
		f, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, fmt.Errorf("read own vDSO: %w", err)
		}
		defer f.Close()
		img := make([]byte, m.Limit-m.Start)
		if _, err := f.ReadAt(img, int64(m.Start)); err != nil {
			return nil, fmt.Errorf("read own vDSO: %w", err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("no %s in own maps", vdsoPath)
}
