// Package elfinfo reads what the symbolizer needs from an executable or shared
// library: its build ID, executable segments and symbols (ELF symbol tables,
// and Go's pclntab, which survives stripping).
package elfinfo

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// ErrNoBuildID is returned for binaries without a GNU or Go build ID: their
// frames cannot be matched to debuginfo.
var ErrNoBuildID = errors.New("no build ID")

const (
	noteTypeGNUBuildID = 3 // NT_GNU_BUILD_ID
	noteTypeGoBuildID  = 4 // Go's ELF note type for its build ID
)

// BuildID returns the GNU build ID in hex, or for Go binaries without one
// GoBuildIDKey of the Go build ID.
func BuildID(f *elf.File) (string, error) {
	var goID []byte
	scan := func(data []byte) (string, bool) {
		for len(data) >= 12 {
			order := f.ByteOrder
			namesz := order.Uint32(data[0:4])
			descsz := order.Uint32(data[4:8])
			typ := order.Uint32(data[8:12])
			nameEnd := 12 + align4(uint64(namesz))
			descEnd := nameEnd + align4(uint64(descsz))
			if nameEnd > uint64(len(data)) || 12+uint64(namesz) > uint64(len(data)) || nameEnd+uint64(descsz) > uint64(len(data)) {
				return "", false
			}
			name := string(bytes.TrimRight(data[12:12+namesz], "\x00"))
			desc := data[nameEnd : nameEnd+uint64(descsz)]
			switch {
			case name == "GNU" && typ == noteTypeGNUBuildID && len(desc) > 0:
				return hex.EncodeToString(desc), true
			case name == "Go" && typ == noteTypeGoBuildID && len(desc) > 0:
				goID = append([]byte(nil), desc...)
			}
			if descEnd > uint64(len(data)) {
				break
			}
			data = data[descEnd:]
		}
		return "", false
	}
	// Notes are a few dozen bytes; a file may declare thousands of huge
	// ones, so all of them together are read up to maxNoteBytes.
	budget := int64(maxNoteBytes)
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || budget <= 0 {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p.Open(), budget))
		budget -= int64(len(data))
		if err != nil {
			continue
		}
		if id, ok := scan(data); ok {
			return id, nil
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > uint64(budget) {
			continue
		}
		data, err := s.Data()
		budget -= int64(len(data))
		if err != nil {
			continue
		}
		if id, ok := scan(data); ok {
			return id, nil
		}
	}
	if len(goID) > 0 {
		return GoBuildIDKey(goID), nil
	}
	return "", ErrNoBuildID
}

// maxNoteBytes bounds the note bytes BuildID reads in one file.
const maxNoteBytes = 1 << 20

// GoBuildIDKey turns a Go build ID ("actionID/contentID/...", ~83 bytes)
// into a 40-hex-digit key like a GNU build ID: consumers accept only short
// lowercase hex (paths, debuginfod URLs). It is the first 20 bytes of its
// SHA-256.
func GoBuildIDKey(goID []byte) string {
	sum := sha256.Sum256(goID)
	return hex.EncodeToString(sum[:20])
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// Segments returns the executable PT_LOAD segments.
func Segments(f *elf.File) []debuginfo.Segment {
	var out []debuginfo.Segment
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			out = append(out, debuginfo.Segment{Offset: p.Off, Vaddr: p.Vaddr, Filesz: p.Filesz})
		}
	}
	return out
}

// Limits bound what reading one binary may cost: the binaries are other
// processes' files, and debug/elf allocates what their headers claim.
type Limits struct {
	// MaxSectionBytes bounds each symbol section read (.symtab, .strtab,
	// .dynsym, .dynstr, .gopclntab; their size once decompressed), default
	// 64 MiB. A binary with a larger one gets a KindTooLarge marker: its
	// symbols would not fit the 8 MiB debuginfo bound anyway.
	MaxSectionBytes uint64
	// MaxGoFuncs bounds the functions a .gopclntab may declare (default
	// 500,000; kubelet has ~80k): debug/gosym allocates ~160 bytes for each
	// declared function before reading any.
	MaxGoFuncs uint64
}

// DefaultLimits are the documented defaults (docs/AGENT.md).
var DefaultLimits = Limits{MaxSectionBytes: 64 << 20, MaxGoFuncs: 500_000}

// ErrMalformed is returned for files debug/elf cannot be trusted with.
var ErrMalformed = errors.New("malformed elf")

// ErrTooLarge is returned when a symbol section exceeds Limits.
var ErrTooLarge = errors.New("symbol tables too large")

// Open parses the ELF headers of r, a file of size bytes. debug/elf inflates
// a compressed section-name table to whatever size it claims while parsing
// the headers, so a file with one is refused before debug/elf sees it.
func Open(r io.ReaderAt, size int64) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%w: %v", ErrMalformed, p)
		}
	}()
	sr := io.NewSectionReader(r, 0, size)
	if err := checkSectionNames(sr); err != nil {
		return nil, err
	}
	f, err = elf.NewFile(sr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return f, nil
}

// checkSectionNames refuses an ELF file whose section-name table is
// compressed (SHF_COMPRESSED): no linker writes one.
func checkSectionNames(r io.ReaderAt) error {
	var ident [elf.EI_NIDENT + 48]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil {
		return fmt.Errorf("%w: read header: %v", ErrMalformed, err)
	}
	if string(ident[:4]) != elf.ELFMAG {
		return fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if elf.Data(ident[elf.EI_DATA]) == elf.ELFDATA2MSB {
		order = binary.BigEndian
	}
	// Offsets of e_shoff, e_shentsize, e_shstrndx and of sh_flags and
	// sh_link in a section header (elf.h).
	var shoff uint64
	var shentsize, shstrndx uint16
	var flagsOff, linkOff int
	var flags func([]byte) uint64
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		shoff, shentsize, shstrndx = order.Uint64(ident[0x28:]), order.Uint16(ident[0x3a:]), order.Uint16(ident[0x3e:])
		flagsOff, linkOff = 8, 40
		flags = func(b []byte) uint64 { return order.Uint64(b) }
	case elf.ELFCLASS32:
		shoff, shentsize, shstrndx = uint64(order.Uint32(ident[0x20:])), order.Uint16(ident[0x2e:]), order.Uint16(ident[0x32:])
		flagsOff, linkOff = 8, 24
		flags = func(b []byte) uint64 { return uint64(order.Uint32(b)) }
	default:
		return fmt.Errorf("%w: bad class", ErrMalformed)
	}
	if shoff == 0 || shstrndx == uint16(elf.SHN_UNDEF) {
		return nil
	}
	if int(shentsize) < linkOff+4 {
		return fmt.Errorf("%w: section header size %d", ErrMalformed, shentsize)
	}
	hdr := make([]byte, shentsize)
	idx := uint64(shstrndx)
	if shstrndx == uint16(elf.SHN_XINDEX) {
		// The real index is in section 0's sh_link.
		if _, err := r.ReadAt(hdr, int64(shoff)); err != nil {
			return fmt.Errorf("%w: read section 0: %v", ErrMalformed, err)
		}
		idx = uint64(order.Uint32(hdr[linkOff:]))
	}
	off := shoff + idx*uint64(shentsize)
	if off < shoff || off > 1<<62 {
		return fmt.Errorf("%w: section-name table header out of range", ErrMalformed)
	}
	if _, err := r.ReadAt(hdr, int64(off)); err != nil {
		return fmt.Errorf("%w: read section-name table header: %v", ErrMalformed, err)
	}
	if flags(hdr[flagsOff:])&uint64(elf.SHF_COMPRESSED) != 0 {
		return fmt.Errorf("%w: compressed section-name table", ErrMalformed)
	}
	return nil
}

// Extract builds the debuginfo of the ELF file at path, with DefaultLimits.
// The file is opened without following a final symlink and without
// blocking, and must be a regular file; the agent reads mapped files with
// ExtractFile from a descriptor it checked itself.
func Extract(path string) (*debuginfo.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open elf %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat elf %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("open elf %s: %w: not a regular file", path, ErrMalformed)
	}
	ef, err := Open(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("open elf %s: %w", path, err)
	}
	d, err := ExtractFile(ef, DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("read elf %s: %w", path, err)
	}
	return d, nil
}

// ExtractFile builds the debuginfo of f within lim. A binary with no symbols
// at all yields Kind NoSymbols; one whose symbol sections exceed lim,
// ErrTooLarge (publish a KindTooLarge marker).
func ExtractFile(f *elf.File, lim Limits) (d *debuginfo.File, err error) {
	// debug/elf and debug/gosym read whatever binaries run on the host; a
	// malformed one must cost its debuginfo, not the agent.
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	id, err := BuildID(f)
	if err != nil {
		return nil, fmt.Errorf("read build id: %w", err)
	}
	for _, s := range f.Sections {
		switch s.Type {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM:
			if err := checkSection(f, s, lim); err != nil {
				return nil, err
			}
			if int(s.Link) < len(f.Sections) {
				if err := checkSection(f, f.Sections[s.Link], lim); err != nil {
					return nil, err
				}
			}
		}
	}
	out := &debuginfo.File{BuildID: id, Kind: debuginfo.KindSymbols, Segments: Segments(f)}
	// pclntab first: it names every Go function, with exact sizes.
	syms, err := goSymbols(f, lim)
	if errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	// Sized for the Go functions: a Go binary's .symtab names them again.
	seen := make(map[uint64]bool, len(syms))
	out.Symbols = make([]debuginfo.Symbol, 0, len(syms))
	add := func(s debuginfo.Symbol) {
		if s.Addr == 0 || s.Name == "" || seen[s.Addr] {
			return
		}
		seen[s.Addr] = true
		out.Symbols = append(out.Symbols, s)
	}
	for _, s := range syms {
		add(s)
	}
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil {
			continue // ErrNoSymbols: stripped
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF {
				continue
			}
			add(debuginfo.Symbol{Addr: s.Value, Size: s.Size, Name: s.Name})
		}
	}
	if len(out.Symbols) == 0 {
		out.Kind = debuginfo.KindNoSymbols
	}
	return out, nil
}

func checkSection(f *elf.File, s *elf.Section, lim Limits) error {
	if s.Size > lim.MaxSectionBytes {
		return fmt.Errorf("%w: section %s of %d bytes over %d", ErrTooLarge, s.Name, s.Size, lim.MaxSectionBytes)
	}
	return nil
}

// goSymbols reads functions from .gopclntab, present in stripped Go binaries.
func goSymbols(f *elf.File, lim Limits) ([]debuginfo.Symbol, error) {
	pcln := f.Section(".gopclntab")
	text := f.Section(".text")
	if pcln == nil || text == nil {
		return nil, errors.New("not a Go binary")
	}
	if err := checkSection(f, pcln, lim); err != nil {
		return nil, err
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
	}
	if n := pclnFuncs(data, f.ByteOrder); n > lim.MaxGoFuncs || n > uint64(len(data))/8 {
		// Each function takes at least 8 bytes of the function table.
		return nil, fmt.Errorf("%w: .gopclntab declares %d functions in %d bytes (at most %d)", ErrTooLarge, n, len(data), lim.MaxGoFuncs)
	}
	// Since Go 1.18 the pclntab header records runtime.text itself; text.Addr
	// is the fallback older formats need.
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf("parse .gopclntab: %w", err)
	}
	out := make([]debuginfo.Symbol, 0, len(tab.Funcs))
	for _, fn := range tab.Funcs {
		out = append(out, debuginfo.Symbol{Addr: fn.Entry, Size: fn.End - fn.Entry, Name: fn.Name})
	}
	return out, nil
}

// pclnFuncs reads the function count of a pclntab header (runtime/symtab.go,
// pcHeader: magic uint32, pad1, pad2, minLC, ptrSize uint8, nfunc int),
// 0 when the header is not one debug/gosym reads.
func pclnFuncs(data []byte, order binary.ByteOrder) uint64 {
	if len(data) < 16 {
		return 0
	}
	switch ptr := data[7]; ptr {
	case 4:
		return uint64(order.Uint32(data[8:]))
	case 8:
		return order.Uint64(data[8:])
	}
	return 0
}

// Encode returns the debuginfo value to publish for d and its kind: the
// encoded symbols, or a TooLarge marker when they exceed the schema's bound.
func Encode(d *debuginfo.File) ([]byte, debuginfo.Kind, error) {
	b, err := debuginfo.Encode(d)
	if errors.Is(err, debuginfo.ErrTooLarge) {
		return debuginfo.Marker(d.BuildID, debuginfo.KindTooLarge), debuginfo.KindTooLarge, nil
	}
	return b, d.Kind, err
}
