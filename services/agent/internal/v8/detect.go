package v8

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// Process is a process running V8: where its metadata came from and where
// the embedded builtins are mapped.
type Process struct {
	PID  int
	Path string // the file holding V8 (node, or libnode.so)
	Meta *Metadata
	// [CodeStart, CodeEnd): the embedded builtins (interpreter included) in
	// the process; 0 when the file has no .symtab to find them in.
	CodeStart, CodeEnd uint64
}

// File is what one binary gives: its metadata and the builtins' ELF
// virtual addresses.
type File struct {
	Meta               *Metadata
	CodeStart, CodeEnd uint64 // ELF virtual addresses; 0: unknown
	loads              []elf.ProgHeader
}

// Limits bound what is read of a binary.
type Limits struct {
	MaxSymbolBytes int64 // .dynsym+.dynstr, and .symtab+.strtab, each (default 64 MiB)
}

// DefaultFileLimits are the agent's.
var DefaultFileLimits = Limits{MaxSymbolBytes: 64 << 20}

// candidate reports whether a mapped file may hold V8: node's executable
// (Debian: /usr/bin/node, also nodejs) or a libnode shared library.
func candidate(path string) bool {
	name := filepath.Base(path)
	return name == "node" || name == "nodejs" || strings.HasPrefix(name, "libnode.so")
}

// Detector finds V8 in processes; what it read of each binary is kept (by
// file identity, at most maxFiles), so node's symbols are read once, not at
// every registration.
type Detector struct {
	files *proc.FileCache[*File]
}

const maxFiles = 64

// NewDetector returns a Detector reading binaries within lim.
func NewDetector(lim Limits) *Detector {
	read := func(r io.ReaderAt, size int64) (*File, error) { return ReadFile(r, size, lim) }
	return &Detector{files: proc.NewFileCache(maxFiles, read)}
}

// Detect finds the V8 pid runs, if any, among its executable mappings.
// mapFiles opens files through /proc/PID/map_files first (proc.OpenMapped).
func (d *Detector) Detect(fs proc.FS, pid int, mapFiles bool) (*Process, error) {
	maps, err := fs.ReadMaps(pid)
	if err != nil && len(maps) == 0 {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	return d.DetectIn(fs, pid, maps, mapFiles)
}

// DetectIn is Detect among maps, pid's executable mappings already read.
func (d *Detector) DetectIn(fs proc.FS, pid int, maps []proc.Mapping, mapFiles bool) (*Process, error) {
	for _, m := range maps {
		if !candidate(m.Path) {
			continue
		}
		f, err := d.files.Get(fs, pid, m, mapFiles)
		if err != nil {
			return nil, err
		}
		bias, ok := proc.LoadBias(f.loads, m)
		if !ok {
			return nil, fmt.Errorf("%w: mapping at offset %#x of %s in no PT_LOAD", ErrInvalid, m.Offset, m.Path)
		}
		p := &Process{PID: pid, Path: m.Path, Meta: f.Meta}
		if f.CodeEnd > f.CodeStart {
			p.CodeStart, p.CodeEnd = f.CodeStart+bias, f.CodeEnd+bias
		}
		return p, nil
	}
	return nil, fmt.Errorf("pid %d: %w", pid, ErrNotV8)
}

const (
	metadataPrefix = "v8dbg_"
	// The embedded builtins (V8's embedded.S): local symbols of .symtab.
	blobCodeSymbol     = "v8_Default_embedded_blob_code_"
	blobCodeSizeSymbol = "v8_Default_embedded_blob_code_size_"
)

// ReadFile reads V8's metadata from the ELF file r of size bytes: the values
// of the exported v8dbg_* symbols (ints in .data, or .bss when zero) and,
// when .symtab is there, the embedded builtins' range. The file is hostile:
// headers are checked before allocation and the symbol tables bounded.
func ReadFile(r io.ReaderAt, size int64, lim Limits) (*File, error) {
	ef, err := elfinfo.Open(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 || ef.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %v %v (x86-64 only)", ErrUnsupported, ef.Class, ef.Machine)
	}
	out := &File{}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			out.loads = append(out.loads, p.ProgHeader)
		}
	}
	values := map[string]int64{}
	err = scanSymbols(r, size, ef, ".dynsym", ".dynstr", lim, func(name []byte, sym elf64Sym) {
		if !bytes.HasPrefix(name, []byte(metadataPrefix)) || sym.size != 4 || len(values) > 4096 {
			return
		}
		if v, ok := out.readInt32(r, size, sym.value); ok {
			values[string(name[len(metadataPrefix):])] = v
		}
	})
	if err != nil {
		return nil, err
	}
	if len(values) == 0 {
		return nil, fmt.Errorf("%w: no v8dbg_ symbols exported", ErrNotV8)
	}
	if out.Meta, err = newMetadata(values); err != nil {
		return nil, err
	}
	// Without .symtab (stripped) the builtins are still walked where no
	// table covers them; the range only matters where one does.
	var blob, blobSize uint64
	_ = scanSymbols(r, size, ef, ".symtab", ".strtab", lim, func(name []byte, sym elf64Sym) {
		switch string(name) {
		case blobCodeSymbol:
			blob = sym.value
		case blobCodeSizeSymbol:
			if v, ok := out.readInt32(r, size, sym.value); ok {
				blobSize = uint64(uint32(v))
			}
		}
	})
	if blob != 0 && blobSize != 0 && blobSize < 1<<30 {
		out.CodeStart, out.CodeEnd = blob, blob+blobSize
	}
	return out, nil
}

// readInt32 reads the 4-byte value at ELF virtual address vaddr: from the
// file, or 0 past a segment's file part (.bss).
func (f *File) readInt32(r io.ReaderAt, size int64, vaddr uint64) (int64, bool) {
	for _, p := range f.loads {
		if vaddr < p.Vaddr || vaddr+4 > p.Vaddr+p.Memsz || vaddr+4 < vaddr {
			continue
		}
		if vaddr+4 > p.Vaddr+p.Filesz {
			return 0, vaddr >= p.Vaddr+p.Filesz
		}
		off := vaddr - p.Vaddr + p.Off
		if off+4 > uint64(size) {
			return 0, false
		}
		var b [4]byte
		if _, err := r.ReadAt(b[:], int64(off)); err != nil {
			return 0, false
		}
		return int64(int32(binary.LittleEndian.Uint32(b[:]))), true
	}
	return 0, false
}

type elf64Sym struct {
	value, size uint64
}

// scanSymbols calls fn for each defined symbol of the table symName (names
// in strName) without allocating per symbol. A missing table is no error.
func scanSymbols(r io.ReaderAt, size int64, ef *elf.File, symName, strName string, lim Limits, fn func(name []byte, sym elf64Sym)) error {
	ss, st := ef.Section(symName), ef.Section(strName)
	if ss == nil || st == nil || ss.Type == elf.SHT_NOBITS || st.Type == elf.SHT_NOBITS {
		return nil
	}
	for _, s := range []*elf.Section{ss, st} {
		if s.Size > uint64(lim.MaxSymbolBytes) || s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset {
			return fmt.Errorf("%w: %s of %d bytes at %d (file %d, limit %d)", ErrInvalid, s.Name, s.Size, s.Offset, size, lim.MaxSymbolBytes)
		}
	}
	syms := make([]byte, ss.Size)
	if _, err := r.ReadAt(syms, int64(ss.Offset)); err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrInvalid, symName, err)
	}
	strs := make([]byte, st.Size)
	if _, err := r.ReadAt(strs, int64(st.Offset)); err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrInvalid, strName, err)
	}
	le := binary.LittleEndian
	const entry = 24 // Elf64_Sym
	for i := 0; i+entry <= len(syms); i += entry {
		e := syms[i : i+entry]
		nameOff := uint64(le.Uint32(e[0:]))
		shndx := elf.SectionIndex(le.Uint16(e[6:]))
		if shndx == elf.SHN_UNDEF || nameOff >= uint64(len(strs)) {
			continue
		}
		name := strs[nameOff:]
		if n := bytes.IndexByte(name, 0); n >= 0 {
			name = name[:n]
		}
		fn(name, elf64Sym{value: le.Uint64(e[8:]), size: le.Uint64(e[16:])})
	}
	return nil
}
