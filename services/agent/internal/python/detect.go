package python

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// interpreterName matches the files that can hold the interpreter: the
// executable (python3.11, also statically linked) or the shared library.
var interpreterName = regexp.MustCompile(`^(?:python|libpython)(3)\.(\d{1,2})`)

// maxDynsymBytes bounds the dynamic symbol table read (python3.11: 77 KiB).
const maxDynsymBytes = 16 << 20

// Detect finds the CPython interpreter pid runs, if any, among its
// executable mappings. mapFiles opens files through /proc/PID/map_files
// first (proc.OpenMapped).
func Detect(fs proc.FS, pid int, mapFiles bool) (*Process, error) {
	maps, err := fs.ReadMaps(pid)
	if err != nil && len(maps) == 0 {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	return DetectIn(fs, pid, maps, mapFiles)
}

// DetectIn is Detect among maps, pid's executable mappings already read.
func DetectIn(fs proc.FS, pid int, maps []proc.Mapping, mapFiles bool) (*Process, error) {
	for _, m := range maps {
		name := filepath.Base(m.Path)
		sm := interpreterName.FindStringSubmatch(name)
		if sm == nil {
			continue
		}
		minor, _ := strconv.Atoi(sm[2])
		v := Version{3, minor}
		p, err := detectFile(fs, pid, m, v, mapFiles)
		if err != nil {
			// python3.11 linked against libpython3.11.so has no _PyRuntime:
			// the library's mapping comes next.
			continue
		}
		return p, nil
	}
	return nil, fmt.Errorf("pid %d: %w", pid, ErrNotPython)
}

func detectFile(fs proc.FS, pid int, m proc.Mapping, v Version, mapFiles bool) (*Process, error) {
	layout, err := LayoutOf(v)
	if err != nil {
		return nil, err
	}
	mf, err := fs.OpenMapped(pid, m, mapFiles)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	f, err := mf.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := ReadSymbols(f, mf.ID.Size)
	if err != nil {
		return nil, err
	}
	if syms.Version != (Version{}) && syms.Version != v {
		return nil, fmt.Errorf("%w: %s is named %s but Py_Version says %s", ErrInvalid, m.Path, v, syms.Version)
	}
	bias, ok := proc.LoadBias(syms.loads, m)
	if !ok {
		return nil, fmt.Errorf("%w: mapping at offset %#x of %s in no PT_LOAD", ErrInvalid, m.Offset, m.Path)
	}
	return &Process{
		PID: pid, Version: v, Layout: layout, Path: m.Path,
		Runtime:   syms.Runtime + bias,
		EvalStart: syms.EvalStart + bias, EvalEnd: syms.EvalEnd + bias,
		CodeType: syms.CodeType + bias, UnicodeType: syms.UnicodeType + bias, BytesType: syms.BytesType + bias,
	}, nil
}

// Symbols are the interpreter's symbols, as ELF virtual addresses.
type Symbols struct {
	Runtime            uint64
	EvalStart, EvalEnd uint64
	CodeType           uint64
	UnicodeType        uint64
	BytesType          uint64
	Version            Version // from Py_Version (3.11+); zero when absent
	loads              []elf.ProgHeader
}

// ReadSymbols reads the interpreter's symbols from the ELF file r of size
// bytes. The file is hostile: headers are checked before allocation and the
// dynamic symbol table is bounded.
func ReadSymbols(r io.ReaderAt, size int64) (*Symbols, error) {
	f, err := elfinfo.Open(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%w: %v %v (x86-64 only)", ErrUnsupported, f.Class, f.Machine)
	}
	for _, name := range []string{".dynsym", ".dynstr"} {
		if s := f.Section(name); s == nil || s.Size > maxDynsymBytes || s.Offset+s.Size > uint64(size) {
			return nil, fmt.Errorf("%w: %s missing or over %d bytes", ErrInvalid, name, maxDynsymBytes)
		}
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%w: dynamic symbols: %v", ErrInvalid, err)
	}
	s := &Symbols{}
	var pyVersion uint64
	for _, sym := range dyn {
		if sym.Section == elf.SHN_UNDEF || sym.Value == 0 {
			continue
		}
		switch sym.Name {
		case "_PyRuntime":
			s.Runtime = sym.Value
		case "_PyEval_EvalFrameDefault":
			s.EvalStart, s.EvalEnd = sym.Value, sym.Value+sym.Size
		case "PyCode_Type":
			s.CodeType = sym.Value
		case "PyUnicode_Type":
			s.UnicodeType = sym.Value
		case "PyBytes_Type":
			s.BytesType = sym.Value
		case "Py_Version":
			pyVersion = sym.Value
		}
	}
	if s.Runtime == 0 || s.EvalStart == 0 || s.EvalEnd <= s.EvalStart || s.CodeType == 0 || s.UnicodeType == 0 || s.BytesType == 0 {
		return nil, fmt.Errorf("%w: no _PyRuntime, _PyEval_EvalFrameDefault, PyCode_Type, PyUnicode_Type or PyBytes_Type", ErrNotPython)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			s.loads = append(s.loads, p.ProgHeader)
		}
	}
	if pyVersion != 0 {
		// const unsigned long Py_Version = PY_VERSION_HEX: 0x030b02f0 is 3.11.2.
		var b [8]byte
		if off, ok := s.fileOffset(pyVersion); ok && off+8 <= uint64(size) {
			if _, err := r.ReadAt(b[:], int64(off)); err == nil {
				hex := binary.LittleEndian.Uint64(b[:])
				s.Version = Version{int(hex >> 24 & 0xff), int(hex >> 16 & 0xff)}
			}
		}
	}
	return s, nil
}

// fileOffset is where the ELF virtual address vaddr is in the file.
func (s *Symbols) fileOffset(vaddr uint64) (uint64, bool) {
	for _, p := range s.loads {
		if p.Vaddr <= vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}
