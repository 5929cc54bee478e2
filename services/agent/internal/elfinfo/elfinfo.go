// Package elfinfo reads what the symbolizer needs from an executable or shared
// library: its build ID, executable segments and symbols (ELF symbol tables,
// and Go's pclntab, which survives stripping).
package elfinfo

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"debug/gosym"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

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
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p.Open(), 1<<20))
		if err != nil {
			continue
		}
		if id, ok := scan(data); ok {
			return id, nil
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		data, err := s.Data()
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

// Extract builds the debuginfo of the ELF file at path. A binary with no
// symbols at all yields Kind NoSymbols.
func Extract(path string) (d *debuginfo.File, err error) {
	// debug/elf and debug/gosym read whatever binaries run on the host; a
	// malformed one must cost its debuginfo, not the agent.
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("read elf %s: malformed: %v", path, r)
		}
	}()
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open elf %s: %w", path, err)
	}
	defer f.Close()
	id, err := BuildID(f)
	if err != nil {
		return nil, fmt.Errorf("read build id of %s: %w", path, err)
	}
	out := &debuginfo.File{BuildID: id, Kind: debuginfo.KindSymbols, Segments: Segments(f)}
	seen := map[uint64]bool{}
	add := func(s debuginfo.Symbol) {
		if s.Addr == 0 || s.Name == "" || seen[s.Addr] {
			return
		}
		seen[s.Addr] = true
		out.Symbols = append(out.Symbols, s)
	}
	// pclntab first: it names every Go function, with exact sizes.
	if syms, err := goSymbols(f); err == nil {
		for _, s := range syms {
			add(s)
		}
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

// goSymbols reads functions from .gopclntab, present in stripped Go binaries.
func goSymbols(f *elf.File) ([]debuginfo.Symbol, error) {
	pcln := f.Section(".gopclntab")
	text := f.Section(".text")
	if pcln == nil || text == nil {
		return nil, errors.New("not a Go binary")
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
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

// Encode returns the debuginfo value to publish for d and its kind: the
// encoded symbols, or a TooLarge marker when they exceed the schema's bound.
func Encode(d *debuginfo.File) ([]byte, debuginfo.Kind, error) {
	b, err := debuginfo.Encode(d)
	if errors.Is(err, debuginfo.ErrTooLarge) {
		return debuginfo.Marker(d.BuildID, debuginfo.KindTooLarge), debuginfo.KindTooLarge, nil
	}
	return b, d.Kind, err
}
