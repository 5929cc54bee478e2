package hotspot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// libjvm is the file HotSpot lives in.
const libjvm = "libjvm.so"

// maxDynsymBytes bounds .dynsym and .dynstr, each (HotSpot 25: 40 KiB).
const maxDynsymBytes = 16 << 20

// fileSymbols is what one libjvm.so gives: its exported table symbols
// (ELF virtual addresses) and its loadable segments.
type fileSymbols struct {
	syms  map[string]uint64
	loads []elf.ProgHeader
	// The tables read from the first process, at load bias vmBias; under
	// Detector.mu.
	vm     *VMStructs
	vmBias uint64
}

// Detector finds HotSpot in processes; the symbols of each libjvm.so are
// kept by file identity (at most maxFiles), read once, not per process.
type Detector struct {
	tables TableLimits

	files *proc.FileCache[*fileSymbols]
	mu    sync.Mutex // guards each fileSymbols' vm and vmBias
}

const maxFiles = 16

// NewDetector returns a Detector reading the tables within lim.
func NewDetector(lim TableLimits) *Detector {
	return &Detector{tables: lim, files: proc.NewFileCache(maxFiles, readSymbols)}
}

// Detect finds the HotSpot pid runs, if any: libjvm.so mapped, its tables
// read from fs.Root/PID/mem, the code cache initialized. A JVM still
// starting fails with ErrNotReady wrapped; call again later.
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
		if filepath.Base(m.Path) != libjvm {
			continue
		}
		fsyms, err := d.files.Get(fs, pid, m, mapFiles)
		if err != nil {
			return nil, err
		}
		bias, ok := proc.LoadBias(fsyms.loads, m)
		if !ok {
			return nil, fmt.Errorf("%w: mapping at offset %#x of %s in no PT_LOAD", ErrInvalid, m.Offset, m.Path)
		}
		syms := make(map[string]uint64, len(fsyms.syms))
		for k, v := range fsyms.syms {
			syms[k] = v + bias
		}
		mem, err := os.Open(fs.Root + "/" + strconv.Itoa(pid) + "/mem")
		if err != nil {
			return nil, fmt.Errorf("open memory of pid %d: %w", pid, err)
		}
		defer mem.Close()
		// The tables are the binary's: read once per file, the addresses
		// of statics moved by the difference of the load addresses.
		d.mu.Lock()
		vm, vmBias := fsyms.vm, fsyms.vmBias
		d.mu.Unlock()
		if vm == nil {
			if vm, err = ReadVMStructs(mem, syms, d.tables); err != nil {
				return nil, err
			}
			vmBias = bias
			d.mu.Lock()
			fsyms.vm, fsyms.vmBias = vm, bias
			d.mu.Unlock()
		}
		p, err := newProcess(mem, vm, bias-vmBias)
		if err != nil {
			return nil, err
		}
		p.PID, p.Path = pid, m.Path
		return p, nil
	}
	return nil, fmt.Errorf("pid %d: %w", pid, ErrNotJVM)
}

// readSymbols reads the gHotSpotVM* symbols of libjvm.so's .dynsym. The
// file is hostile: headers are checked before allocation, the tables
// bounded, and nothing allocated per symbol but the few kept.
func readSymbols(r io.ReaderAt, size int64) (*fileSymbols, error) {
	ef, err := elfinfo.Open(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 || ef.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %v %v (x86-64 only)", ErrUnsupported, ef.Class, ef.Machine)
	}
	out := &fileSymbols{syms: map[string]uint64{}}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			out.loads = append(out.loads, p.ProgHeader)
		}
	}
	ss, st := ef.Section(".dynsym"), ef.Section(".dynstr")
	if ss == nil || st == nil || ss.Type == elf.SHT_NOBITS || st.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("%w: no .dynsym", ErrNotJVM)
	}
	for _, s := range []*elf.Section{ss, st} {
		if s.Size > maxDynsymBytes || s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset {
			return nil, fmt.Errorf("%w: %s of %d bytes at %d (file %d, limit %d)", ErrInvalid, s.Name, s.Size, s.Offset, size, maxDynsymBytes)
		}
	}
	syms := make([]byte, ss.Size)
	if _, err := r.ReadAt(syms, int64(ss.Offset)); err != nil {
		return nil, fmt.Errorf("%w: read .dynsym: %v", ErrInvalid, err)
	}
	strs := make([]byte, st.Size)
	if _, err := r.ReadAt(strs, int64(st.Offset)); err != nil {
		return nil, fmt.Errorf("%w: read .dynstr: %v", ErrInvalid, err)
	}
	le := binary.LittleEndian
	const entry = 24 // Elf64_Sym
	for i := 0; i+entry <= len(syms); i += entry {
		e := syms[i : i+entry]
		nameOff := uint64(le.Uint32(e[0:]))
		if elf.SectionIndex(le.Uint16(e[6:])) == elf.SHN_UNDEF || nameOff >= uint64(len(strs)) {
			continue
		}
		name := strs[nameOff:]
		if !bytes.HasPrefix(name, []byte(symPrefix)) {
			continue
		}
		if n := bytes.IndexByte(name, 0); n >= 0 && n <= maxSymLength {
			out.syms[string(name[:n])] = le.Uint64(e[8:])
		}
	}
	if len(out.syms) == 0 {
		return nil, fmt.Errorf("%w: no gHotSpotVM symbols exported", ErrNotJVM)
	}
	return out, nil
}
