package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
)

// Compile reads the call-frame sections of the ELF file in r (size bytes), of
// the agent's architecture, and compiles its unwind table. A file without
// call-frame information gives an empty table, not an error: the unwinder
// falls back to frame pointers there.
func Compile(r io.ReaderAt, size int64, lim Limits) (*Table, error) {
	return compileArch(r, size, hostArch, lim)
}

// compileArch compiles the table of a file of arch.
func compileArch(r io.ReaderAt, size int64, arch Arch, lim Limits) (*Table, error) {
	_, t, err := inspectArch(r, size, arch, lim, func(Key) bool { return true })
	return t, err
}

// inspect reads the ELF header of the file in r and its key (build ID and
// PT_LOAD layout), then compiles its table when want(key) says so (a nil
// table otherwise).
func inspect(r io.ReaderAt, size int64, lim Limits, want func(Key) bool) (Key, *Table, error) {
	return inspectArch(r, size, hostArch, lim, want)
}

// machines are the ELF machines of each Arch.
var machines = map[Arch]elf.Machine{ArchX86_64: elf.EM_X86_64, ArchArm64: elf.EM_AARCH64}

func inspectArch(r io.ReaderAt, size int64, arch Arch, lim Limits, want func(Key) bool) (k Key, t *Table, err error) {
	defer func() {
		// debug/elf is hardened, but a panic on a hostile file must cost one
		// table, not the agent.
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("%w: panic reading ELF: %v", ErrInvalid, p)
		}
	}()
	if err := checkHeader(r, size); err != nil {
		return Key{}, nil, err
	}
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return Key{}, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != machines[arch] || f.Data != elf.ELFDATA2LSB {
		return Key{}, nil, fmt.Errorf("%w: %v %v %v (%v only)", ErrUnsupported, f.Class, f.Machine, f.Data, arch)
	}
	k = keyOf(f)
	if !want(k) {
		return k, nil, nil
	}
	t, err = compileELF(f, size, arch, lim)
	return k, t, err
}

func compileELF(f *elf.File, size int64, arch Arch, lim Limits) (*Table, error) {
	var st Stats
	var eh, debug []fde
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		b, err := sectionData(s, size, lim)
		if err != nil {
			return nil, err
		}
		if eh, err = parseEntries(b, s.Addr, ehFrame, arch, lim, &st); err != nil {
			return nil, fmt.Errorf(".eh_frame: %w", err)
		}
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		b, err := sectionData(s, size, lim)
		if err != nil {
			return nil, err
		}
		if debug, err = parseEntries(b, s.Addr, debugFrame, arch, lim, &st); err != nil {
			return nil, fmt.Errorf(".debug_frame: %w", err)
		}
	}
	if len(debug) == 0 {
		// Go without DWARF: its pclntab. A bad one costs its rows only.
		gofdes, err := goFDEs(f, size, arch, lim, &st, false)
		if err != nil {
			st.BadEntries++
		}
		debug = gofdes
	} else if roots, err := goFDEs(f, size, arch, lim, &st, true); err == nil {
		// Go with DWARF: .debug_frame gives runtime.mstart and goexit a
		// return address (garbage past a thread's or goroutine's first
		// frame); the pclntab's end-of-stack rows win over it there.
		eh = append(eh, roots...)
	}
	if arch == ArchArm64 {
		// arm64's PLT stubs have no FDE: rows saying they keep sp and x30.
		eh = append(eh, arm64PLTFDEs(f)...)
	}
	t, err := build(eh, debug, lim, &st)
	if err != nil {
		return nil, err
	}
	t.Arch = arch
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			t.Loads = append(t.Loads, Load{Offset: p.Off, Vaddr: p.Vaddr, FileSize: p.Filesz})
		}
	}
	return t, nil
}

// sectionData reads a section after checking its sizes against the file and
// the limits, so a header claiming gigabytes allocates nothing.
func sectionData(s *elf.Section, fileSize int64, lim Limits) ([]byte, error) {
	if s.FileSize > uint64(fileSize) || s.Offset > uint64(fileSize)-s.FileSize {
		return nil, fmt.Errorf("%w: section %s (%d bytes at %d) past the end of a %d-byte file", ErrInvalid, s.Name, s.FileSize, s.Offset, fileSize)
	}
	if s.Size > uint64(lim.MaxSectionBytes) || s.FileSize > uint64(lim.MaxSectionBytes) {
		return nil, fmt.Errorf("%w: section %s of %d bytes (limit %d)", ErrTooLarge, s.Name, s.Size, lim.MaxSectionBytes)
	}
	b := make([]byte, s.Size)
	if _, err := io.ReadFull(s.Open(), b); err != nil {
		return nil, fmt.Errorf("%w: read section %s: %v", ErrInvalid, s.Name, err)
	}
	return b, nil
}

// checkHeader checks the ELF header's tables against the file size before
// debug/elf allocates for them: a 64-byte file claiming 65535 sections would
// otherwise cost megabytes.
func checkHeader(r io.ReaderAt, size int64) error {
	var h [64]byte
	if size < int64(len(h)) {
		return fmt.Errorf("%w: %d bytes is too short for an ELF64 header", ErrInvalid, size)
	}
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return fmt.Errorf("%w: read ELF header: %v", ErrInvalid, err)
	}
	if string(h[:4]) != elf.ELFMAG {
		return fmt.Errorf("%w: not an ELF file", ErrInvalid)
	}
	if elf.Class(h[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(h[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return fmt.Errorf("%w: %v %v (64-bit little-endian only)", ErrUnsupported, elf.Class(h[elf.EI_CLASS]), elf.Data(h[elf.EI_DATA]))
	}
	le := binary.LittleEndian
	table := func(name string, off uint64, entSize, num uint16) error {
		n := uint64(entSize) * uint64(num)
		if num != 0 && (off > uint64(size) || n > uint64(size)-off) {
			return fmt.Errorf("%w: %s table (%d entries of %d bytes at %d) past the end of a %d-byte file", ErrInvalid, name, num, entSize, off, size)
		}
		return nil
	}
	if err := table("program header", le.Uint64(h[32:]), le.Uint16(h[54:]), le.Uint16(h[56:])); err != nil {
		return err
	}
	return table("section header", le.Uint64(h[40:]), le.Uint16(h[58:]), le.Uint16(h[60:]))
}
