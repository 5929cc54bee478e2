package debuginfo

import (
	"errors"
	"reflect"
	"testing"
)

func sample() *File {
	return &File{
		BuildID:  "abcdef0123",
		Kind:     KindSymbols,
		Segments: []Segment{{Offset: 0x1000, Vaddr: 0x401000, Filesz: 0x2000}},
		Symbols: []Symbol{
			{Addr: 0x401100, Size: 0x80, Name: "main.work"},
			{Addr: 0x401000, Size: 0x100, Name: "main.main"},
		},
		Lines: []Line{{Addr: 0x401100, File: "main.go", Line: 12}, {Addr: 0x401140, File: "main.go", Line: 13}},
	}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestSymbolize(t *testing.T) {
	f := sample()
	if _, err := Encode(f); err != nil { // sorts
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		offset   uint64
		wantSym  string
		wantLine uint32
		wantOK   bool
	}{
		{"first function", 0x1010, "main.main", 0, true},
		{"line table hit", 0x1150, "main.work", 13, true},
		{"past last symbol", 0x1190, "", 0, false},
		{"outside segments", 0x10, "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			va, ok := f.VaddrOf(tt.offset)
			if !ok {
				if tt.wantOK {
					t.Fatalf("offset %#x not in a segment", tt.offset)
				}
				return
			}
			sym, line, ok := f.Symbolize(va)
			if ok != tt.wantOK || sym.Name != tt.wantSym || line.Line != tt.wantLine {
				t.Fatalf("Symbolize(%#x) = %q line %d ok %v; want %q %d %v", va, sym.Name, line.Line, ok, tt.wantSym, tt.wantLine, tt.wantOK)
			}
		})
	}
}

func TestMarker(t *testing.T) {
	f, err := Decode(Marker("id", KindTooLarge))
	if err != nil || f.Kind != KindTooLarge || f.BuildID != "id" {
		t.Fatalf("marker = %+v, %v", f, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, in := range map[string][]byte{"empty": nil, "not gzip": []byte("hello"), "gzip of junk": mustGzip([]byte("SSDI\x02"))} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(in); !errors.Is(err, ErrBadFormat) {
				t.Fatalf("Decode = %v, want ErrBadFormat", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(sample())
	f.Add(b)
	f.Add(Marker("x", KindNoSymbols))
	f.Add(mustGzip([]byte("SSDI\x01\x01\x00\xff\xff\xff\xff\x0f")))
	f.Fuzz(func(t *testing.T, in []byte) {
		file, err := Decode(in)
		if err != nil {
			return
		}
		// Whatever decodes must encode again and decode to the same thing.
		again, err := Encode(file)
		if err != nil {
			return
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
