package record

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// gzipLevel compresses b at a gzip level.
func gzipLevel(t testing.TB, b []byte, level int) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestAppendStored(t *testing.T) {
	content := bytes.Repeat([]byte("stackstream "), 20000) // several 64 KiB blocks
	stored := gzipLevel(t, content, gzip.NoCompression)
	got, ok := AppendStored([]byte("x"), stored)
	if !ok || !bytes.Equal(got, append([]byte("x"), content...)) {
		t.Fatalf("stored value: ok=%v, %d bytes", ok, len(got))
	}
	bad := func(name string, v []byte) {
		t.Helper()
		if got, ok := AppendStored([]byte("x"), v); ok || string(got) != "x" {
			t.Errorf("%s: ok=%v, dst %d bytes, want refused and dst unchanged", name, ok, len(got))
		}
	}
	bad("compressed", gzipLevel(t, content, gzip.BestSpeed))
	bad("empty", nil)
	bad("truncated", stored[:len(stored)-3])
	bad("trailing data", append(bytes.Clone(stored), stored...))
	crc := bytes.Clone(stored)
	crc[len(crc)-8] ^= 1
	bad("checksum", crc)
	body := bytes.Clone(stored)
	body[20] ^= 1
	bad("changed content", body)
	var named bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&named, gzip.NoCompression)
	zw.Name = "profile.pb"
	zw.Write(content)
	zw.Close()
	bad("header flags", named.Bytes())
}

// FuzzAppendStored: whatever AppendStored accepts, a gzip reader reads
// without error to the same bytes.
func FuzzAppendStored(f *testing.F) {
	f.Add(gzipLevel(f, []byte("hello"), gzip.NoCompression))
	// Several stored blocks: Flush ends one (and writes an empty one).
	var blocks bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&blocks, gzip.NoCompression)
	zw.Write([]byte("stack"))
	zw.Flush()
	zw.Write([]byte("stream"))
	zw.Close()
	f.Add(blocks.Bytes())
	f.Add(gzipLevel(f, []byte("hello"), gzip.BestSpeed))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := AppendStored(nil, v)
		if !ok {
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(v))
		if err != nil {
			t.Fatalf("accepted, but gzip: %v", err)
		}
		want, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("accepted, but gzip: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("accepted %d bytes, gzip reads %d", len(got), len(want))
		}
	})
}
