package unwind

import (
	"debug/elf"
	"encoding/binary"

	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// Key names a table. Files with the same build ID (GNU, or Go's) and the
// same PT_LOAD layout hold the same code at the same addresses: two copies of
// a binary at different paths, or one library in several containers' images,
// share one table. A file without a build ID has a table of its own, keyed
// by its device, inode, size and times.
type Key struct {
	BuildID string      // hex; "" when the file has none
	Loads   string      // the PT_LOAD headers (offset, address, file size) with a build ID
	File    proc.FileID // without a build ID
}

// keyOf returns the build-ID key of f, or the zero Key when f has no build
// ID (the caller keys it by its file).
func keyOf(f *elf.File) Key {
	id, err := elfinfo.BuildID(f)
	if err != nil {
		return Key{}
	}
	var loads []byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = binary.LittleEndian.AppendUint64(loads, p.Off)
			loads = binary.LittleEndian.AppendUint64(loads, p.Vaddr)
			loads = binary.LittleEndian.AppendUint64(loads, p.Filesz)
		}
	}
	return Key{BuildID: id, Loads: string(loads)}
}

// fileKey is the key of a file without a build ID (or one that could not be
// read).
func fileKey(id proc.FileID) Key { return Key{File: id} }
