package elfinfo

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

func TestExtract(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		path     string
		kind     debuginfo.Kind
		function string // must be among the symbols
	}{
		{"c with symbols", workload.BuildC(t, dir, "c-syms", false), debuginfo.KindSymbols, workload.CHotFunction},
		// Only undefined imports are left in .dynsym.
		{"c stripped", workload.BuildC(t, dir, "c-stripped", true), debuginfo.KindNoSymbols, ""},
		{"go", workload.BuildGo(t, dir, "go-syms", false), debuginfo.KindSymbols, workload.GoHotFunction},
		// pclntab survives -s -w.
		{"go stripped", workload.BuildGo(t, dir, "go-stripped", true), debuginfo.KindSymbols, workload.GoHotFunction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Extract(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if d.Kind != tt.kind {
				t.Fatalf("kind %d, want %d", d.Kind, tt.kind)
			}
			if len(d.BuildID) < 16 {
				t.Fatalf("build id %q", d.BuildID)
			}
			if len(d.Segments) == 0 {
				t.Fatal("no executable segments")
			}
			if tt.function != "" {
				var found debuginfo.Symbol
				for _, s := range d.Symbols {
					if s.Name == tt.function {
						found = s
					}
				}
				if found.Size == 0 {
					t.Fatalf("%s not among %d symbols (or without size)", tt.function, len(d.Symbols))
				}
				// The address must resolve back to it through the encoded form.
				b, kind, err := Encode(d)
				if err != nil || kind != debuginfo.KindSymbols {
					t.Fatalf("Encode = %v, %v", kind, err)
				}
				dec, err := debuginfo.Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				if s, _, ok := dec.Symbolize(found.Addr + found.Size/2); !ok || s.Name != tt.function {
					t.Fatalf("Symbolize(mid of %s) = %v, %v", tt.function, s, ok)
				}
			}
		})
	}
}

func TestExtractNoSymbols(t *testing.T) {
	// A stripped C binary still has .dynsym for what it exports; a static,
	// stripped one with nothing exported has no symbols.
	dir := t.TempDir()
	path := workload.BuildC(t, dir, "c-stripped", true)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Symbols(); err == nil {
		t.Fatal("stripped binary still has .symtab")
	}
	d, err := Extract(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Symbols {
		if s.Name == workload.CHotFunction {
			t.Fatalf("stripped binary names %s", s.Name)
		}
	}
	if len(d.Symbols) == 0 && d.Kind != debuginfo.KindNoSymbols {
		t.Fatalf("no symbols but kind %d", d.Kind)
	}
}

func TestExtractRejects(t *testing.T) {
	if _, err := Extract("/nonexistent"); err == nil {
		t.Fatal("want an error for a missing file")
	}
	if _, err := Extract("elfinfo.go"); err == nil {
		t.Fatal("want an error for a file that is not ELF")
	}
}

func FuzzExtract(f *testing.F) {
	dir := f.TempDir()
	for _, p := range []string{"/proc/self/exe"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 64<<20 {
			f.Add(b[:min(len(b), 1<<16)])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "bin")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Extract(path)
		if err == nil && d.BuildID == "" {
			t.Fatal("debuginfo without build ID")
		}
	})
}

// TestGoBuildIDFallback links a Go binary without a GNU build ID note (-B
// none): its key comes from the Go build ID, short hex like a GNU one.
func TestGoBuildIDFallback(t *testing.T) {
	path := workload.BuildGo(t, t.TempDir(), "go-nognu", true, "-B", "none")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".note.gnu.build-id"); s != nil {
		t.Fatal("-B none still wrote a GNU build ID note")
	}
	id, err := BuildID(f)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(id) {
		t.Fatalf("build id %q, want 40 hex digits", id)
	}
	d, err := Extract(path)
	if err != nil || d.BuildID != id || d.Kind != debuginfo.KindSymbols {
		t.Fatalf("Extract = %+v, %v", d, err)
	}
}

// TestExtractBounds feeds binaries whose headers claim more than the limits
// allow: each is refused before debug/elf or debug/gosym allocates for it.
func TestExtractBounds(t *testing.T) {
	dir := t.TempDir()
	cExe := workload.BuildC(t, dir, "c-bounds", false)
	goExe := workload.BuildGo(t, dir, "go-bounds", true)
	open := func(t *testing.T, b []byte) (*elf.File, error) {
		t.Helper()
		return Open(bytes.NewReader(b), int64(len(b)))
	}
	read := func(t *testing.T, path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("symbol table over the section bound", func(t *testing.T) {
		f, err := open(t, read(t, cExe))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ExtractFile(f, Limits{MaxSectionBytes: 1 << 10, MaxGoFuncs: DefaultLimits.MaxGoFuncs}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ExtractFile = %v, want ErrTooLarge", err)
		}
	})
	t.Run("more Go functions than the bound", func(t *testing.T) {
		f, err := open(t, read(t, goExe))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ExtractFile(f, Limits{MaxSectionBytes: DefaultLimits.MaxSectionBytes, MaxGoFuncs: 10}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ExtractFile = %v, want ErrTooLarge", err)
		}
	})
	t.Run("pclntab claiming 2^40 functions", func(t *testing.T) {
		b := read(t, goExe)
		f, err := open(t, b)
		if err != nil {
			t.Fatal(err)
		}
		pcln := f.Section(".gopclntab")
		if pcln == nil || b[pcln.Offset+7] != 8 {
			t.Fatal("no 64-bit .gopclntab")
		}
		binary.LittleEndian.PutUint64(b[pcln.Offset+8:], 1<<40)
		if f, err = open(t, b); err != nil {
			t.Fatal(err)
		}
		if _, err := ExtractFile(f, DefaultLimits); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ExtractFile = %v, want ErrTooLarge", err)
		}
	})
	t.Run("compressed section-name table", func(t *testing.T) {
		b := read(t, cExe)
		// The names become a zlib stream of 64 MiB of zeros (~64 KiB),
		// appended to the file, which debug/elf would inflate while parsing
		// the headers.
		const claimed = 64 << 20
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(make([]byte, claimed))
		zw.Close()
		chdr := make([]byte, 24) // Elf64_Chdr
		binary.LittleEndian.PutUint32(chdr, uint32(elf.COMPRESS_ZLIB))
		binary.LittleEndian.PutUint64(chdr[8:], claimed)
		binary.LittleEndian.PutUint64(chdr[16:], 1)
		shoff := binary.LittleEndian.Uint64(b[0x28:])
		shstrndx := uint64(binary.LittleEndian.Uint16(b[0x3e:]))
		shentsize := uint64(binary.LittleEndian.Uint16(b[0x3a:]))
		sh := b[shoff+shstrndx*shentsize:]
		binary.LittleEndian.PutUint64(sh[8:], binary.LittleEndian.Uint64(sh[8:])|uint64(elf.SHF_COMPRESSED)) // sh_flags
		binary.LittleEndian.PutUint64(sh[24:], uint64(len(b)))                                               // sh_offset
		binary.LittleEndian.PutUint64(sh[32:], uint64(len(chdr)+z.Len()))                                    // sh_size
		b = append(append(b, chdr...), z.Bytes()...)
		if _, err := open(t, b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Open = %v, want ErrMalformed", err)
		}
	})
}
