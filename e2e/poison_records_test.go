package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
)

func meta(host string) record.Meta {
	return record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "poison-test"}
}

func encode(t *testing.T, p *profile.Profile) []byte {
	t.Helper()
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func cpuOf(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[len(s.Value)-1]
	}
	return n
}

const tick = 10_000_000 // ns of CPU per sample, 100 Hz

// goodRecords is one valid CPU profile at at.
func goodRecords(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		l := map[string]string{record.LabelPID: "42", record.LabelComm: "poison", record.LabelService: "poison"}
		b.Sample(l, []int64{7, 7 * tick}, "poison.leaf", "poison.mid", "poison.main")
		b.Sample(l, []int64{3, 3 * tick}, "poison.other", "poison.main")
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

func withHeaders(build func(*testing.T, string) ([]*kgo.Record, int64), h func(host string) []kgo.RecordHeader) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		recs, cpu := build(t, host)
		for _, r := range recs {
			r.Headers = h(host)
		}
		return recs, cpu
	}
}

// value is a record with valid headers and the value v.
func value(v []byte) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		return []*kgo.Record{{Key: []byte(host), Value: v, Headers: meta(host).Headers()}}, 0
	}
}

func junk(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[0] = 'J' // never the gzip magic
	return b
}

// notPprof fails the test unless b is indeed no pprof profile.
func notPprof(t *testing.T, b []byte) []byte {
	if _, err := profile.ParseUncompressed(b); err == nil {
		t.Fatalf("fixture %.20q... parses as pprof", b)
	}
	return b
}

// pb writes protobuf by hand, for profiles the pprof package refuses to
// write.
type pb []byte

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) uint(field int, v uint64) pb { return b.varint(uint64(field) << 3).varint(v) }

func (b pb) bytes(field int, v []byte) pb {
	return append(b.varint(uint64(field)<<3|2).varint(uint64(len(v))), v...)
}

func (b pb) packed(field int, vs ...uint64) pb {
	var p pb
	for _, v := range vs {
		p = p.varint(v)
	}
	return b.bytes(field, p)
}

// profileHeader is a CPU profile's sample types, string table, time and
// period, with one function and location (ID 1) when withLocation.
func profileHeader(at time.Time, withLocation bool) pb {
	strs := []string{"", "samples", "count", "cpu", "nanoseconds", "poison.bomb"}
	var p pb
	p = p.bytes(1, pb(nil).uint(1, 1).uint(2, 2))
	p = p.bytes(1, pb(nil).uint(1, 3).uint(2, 4))
	if withLocation {
		p = p.bytes(5, pb(nil).uint(1, 1).uint(2, 5).uint(3, 5))
		p = p.bytes(4, pb(nil).uint(1, 1).bytes(4, pb(nil).uint(1, 1)))
	}
	for _, s := range strs {
		p = p.bytes(6, []byte(s))
	}
	p = p.uint(9, uint64(at.UnixNano())).uint(10, uint64(10*time.Second))
	p = p.bytes(11, pb(nil).uint(1, 3).uint(2, 4)).uint(12, tick)
	return p
}

// missingLocation is issue 11's first case: a valid gzip pprof whose one
// sample names location 7, which the profile does not define.
func missingLocation(t *testing.T, at time.Time) []byte {
	p := profileHeader(at, false).bytes(2, pb(nil).packed(1, 7).packed(2, 1, tick))
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(p)
	zw.Close()
	return buf.Bytes()
}

// gzipBomb is a small record inflating to about size bytes of pprof: one
// valid sample, repeated.
func gzipBomb(t *testing.T, at time.Time, size int) []byte {
	sample := pb(nil).bytes(2, pb(nil).packed(1, 1).packed(2, 1, tick))
	chunk := bytes.Repeat(sample, 64<<10/len(sample))
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(profileHeader(at, true))
	for n := 0; n < size; n += len(chunk) {
		zw.Write(chunk)
	}
	zw.Close()
	return buf.Bytes()
}

// oddLabelKeys carries 2,000 distinct label keys no mapping should take as
// field names: dots (a vs a.b), dashes, spaces, digits first, unicode, and
// keys past the length cap.
func oddLabelKeys(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	key := func(n int) string {
		switch {
		case n == 0:
			return "a"
		case n == 1:
			return "a.b"
		}
		switch n % 8 {
		case 0:
			return fmt.Sprintf("a.%d", n)
		case 1:
			return fmt.Sprintf("a.b.%d", n)
		case 2:
			return fmt.Sprintf("dash-%d", n)
		case 3:
			return fmt.Sprintf("%d", n)
		case 4:
			return fmt.Sprintf("ключ.%d", n)
		case 5:
			return fmt.Sprintf("with space %d", n)
		case 6:
			return fmt.Sprintf("🔥%d", n)
		default:
			return strings.Repeat("long", 20) + strconv.Itoa(n)
		}
	}
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		seen := map[string]bool{}
		for i := range 250 {
			l := map[string]string{record.LabelPID: strconv.Itoa(1000 + i), record.LabelComm: "odd"}
			for j := range 8 {
				k := key(i*8 + j)
				seen[k] = true
				l[k] = "v"
			}
			b.Sample(l, []int64{1, tick}, "poison.odd", "poison.main")
		}
		if len(seen) != 2000 {
			t.Fatalf("odd label keys: %d distinct, want 2000", len(seen))
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// escapableLabels gives n processes each a label value of size bytes of
// characters JSON escapes (six bytes each for the control ones), distinct
// per process.
func escapableLabels(at time.Time, n, size int) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		const unit = "\x01\"\\<>&\u2028\x1f" // 10 bytes
		b := pproftest.NewCPU(at, 10*time.Second)
		for i := range n {
			v := fmt.Sprintf("%04d", i) + strings.Repeat(unit, (size-4)/len(unit))
			b.Sample(map[string]string{record.LabelPID: strconv.Itoa(2000 + i), record.LabelComm: "blob", "blob": v},
				[]int64{2, 2 * tick}, "poison.blob", "poison.main")
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// splitInterval is one host's interval in two records, as the agent splits
// one too large: same host, time and labels, parts "0" and "1".
func splitInterval(at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		l := map[string]string{record.LabelPID: "4", record.LabelComm: "split"}
		p0 := pproftest.NewCPU(at, 10*time.Second).
			Sample(l, []int64{5, 5 * tick}, "split.a", "split.main").Profile()
		p1 := pproftest.NewCPU(at, 10*time.Second).
			Sample(l, []int64{3, 3 * tick}, "split.a", "split.main").
			Sample(l, []int64{2, 2 * tick}, "split.b", "split.main").Profile()
		var recs []*kgo.Record
		for i, p := range []*profile.Profile{p0, p1} {
			h := append(meta(host).Headers(), kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(strconv.Itoa(i))})
			recs = append(recs, &kgo.Record{Key: []byte(host), Value: encode(t, p), Headers: h})
		}
		return recs, cpuOf(p0) + cpuOf(p1)
	}
}

// randomBuildIDs is a raw profile with n mappings, each with a build ID no
// source knows and one sample in it.
func randomBuildIDs(at time.Time, rng *rand.Rand, n int) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		l := map[string]string{record.LabelPID: "5", record.LabelComm: "buildids"}
		for i := range n {
			id := make([]byte, 20)
			for j := range id {
				id[j] = byte(rng.Uint32())
			}
			start := uint64(0x7f0000000000) + uint64(i)<<20
			m := b.Mapping(start, start+1<<20, 0, fmt.Sprintf("/opt/poison/lib%04d.so", i), hex.EncodeToString(id))
			b.AddressSample(l, []int64{1, tick}, m, start+0x1234)
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

// largeProfile is issue 11's case 12: google/pprof's own large.cpu (a real
// 1.2 MB Go CPU profile, 20,430 samples, each its own stack), re-timed to
// at. Its gzip value is over 1 MiB, so its symbolized form cannot fit one
// record of the symbolizer's default size, compressed or not.
func largeProfile(t *testing.T, at time.Time) func(*testing.T, string) ([]*kgo.Record, int64) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/google/pprof").Output()
	if err != nil {
		t.Fatalf("locate the github.com/google/pprof module for its testdata: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal", "proftest", "testdata", "large.cpu"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(raw)
	if err != nil {
		t.Fatalf("parse large.cpu: %v", err)
	}
	p.TimeNanos = at.UnixNano()
	v := encode(t, p)
	if len(v) <= 1<<20 {
		t.Fatalf("large profile fixture is %d bytes gzip, want over 1 MiB", len(v))
	}
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		return []*kgo.Record{{Key: []byte(host), Value: v, Headers: meta(host).Headers()}}, cpuOf(p)
	}
}

func totalBytes(recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Value)
	}
	return n
}

func randomHex(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// Where the debuginfo case's binaries are mapped: the sampled address is at
// file offset 0x1000, virtual address 0x401000 in the genuine symbols.
const (
	debuginfoVaddr  = 0x400000
	debuginfoSample = 0x1000
)

// hostileDebuginfo is what a hostile writer of the debuginfo topic sends
// around a genuine value for genuine: a poorer value, a too-large marker
// and a tombstone under the same key, a richer value under mismatch whose
// own build ID is genuine's, a non-hex key, 1.5 MB of junk, 16 values of
// 4 MiB of gzip junk, and for each bomb ID a valid value whose string table
// inflates ~150 KB to 120 MiB.
func hostileDebuginfo(rng *rand.Rand, genuine, mismatch string, bombs []string) func(*testing.T) []*kgo.Record {
	return func(t *testing.T) []*kgo.Record {
		enc := func(f *debuginfo.File) []byte {
			v, err := debuginfo.Encode(f)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		seg := []debuginfo.Segment{{Offset: 0, Vaddr: debuginfoVaddr, Filesz: 1 << 20}}
		at := uint64(debuginfoVaddr + debuginfoSample)
		rec := func(key string, v []byte) *kgo.Record { return &kgo.Record{Key: []byte(key), Value: v} }
		recs := []*kgo.Record{
			rec(genuine, enc(&debuginfo.File{BuildID: genuine, Kind: debuginfo.KindSymbols, Segments: seg,
				Symbols: []debuginfo.Symbol{{Addr: at, Size: 0x100, Name: "poison_genuine"}, {Addr: at + 0x1000, Size: 0x100, Name: "poison_genuine_2"}},
				Lines:   []debuginfo.Line{{Addr: at, File: "genuine.c", Line: 10}}})),
			rec(genuine, enc(&debuginfo.File{BuildID: genuine, Kind: debuginfo.KindSymbols, Segments: seg,
				Symbols: []debuginfo.Symbol{{Addr: at, Size: 0x100, Name: "poison_forged"}}})),
			rec(genuine, debuginfo.Marker(genuine, debuginfo.KindTooLarge)),
			rec(genuine, nil),
			rec(mismatch, enc(&debuginfo.File{BuildID: genuine, Kind: debuginfo.KindSymbols, Segments: seg,
				Symbols: []debuginfo.Symbol{{Addr: at, Size: 0x100, Name: "poison_forged"}, {Addr: at + 0x1000, Size: 0x100, Name: "poison_forged_2"}, {Addr: at + 0x2000, Size: 0x100, Name: "poison_forged_3"}}})),
			rec("not-a-build-id", enc(&debuginfo.File{BuildID: "not-a-build-id", Kind: debuginfo.KindSymbols, Segments: seg,
				Symbols: []debuginfo.Symbol{{Addr: at, Size: 0x100, Name: "poison_forged"}}})),
			rec(randomHex(rng, 20), junk(rng, 1_500_000)),
		}
		for range 16 {
			recs = append(recs, rec(randomHex(rng, 20), pproftest.Gzip(junk(rng, 4<<20))))
		}
		for _, id := range bombs {
			var raw pb
			raw = append(raw, "SSDI\x01"...)
			raw = raw.varint(uint64(debuginfo.KindSymbols)).varint(uint64(len(id)))
			raw = append(raw, id...)
			raw = raw.varint(0).varint(1).varint(120 << 20) // no segments; one string
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(raw)
			zeros := make([]byte, 1<<20)
			for range 120 {
				zw.Write(zeros)
			}
			zw.Write(pb(nil).varint(0).varint(0)) // no symbols, no lines
			zw.Close()
			recs = append(recs, rec(id, buf.Bytes()))
		}
		return recs
	}
}

// debuginfoProfile samples one address in each of the genuine, the
// mismatched and a bomb's binary.
func debuginfoProfile(at time.Time, genuine, mismatch, bomb string) func(*testing.T, string) ([]*kgo.Record, int64) {
	return func(t *testing.T, host string) ([]*kgo.Record, int64) {
		b := pproftest.NewCPU(at, 10*time.Second)
		l := map[string]string{record.LabelPID: "6", record.LabelComm: "debuginfo"}
		for i, m := range []struct{ id, file string }{
			{genuine, "/opt/poison/libgenuine.so"}, {mismatch, "/opt/poison/libmismatch.so"}, {bomb, "/opt/poison/libbomb.so"},
		} {
			start := uint64(0x7f1000000000) + uint64(i)<<24
			mp := b.Mapping(start, start+1<<20, 0, m.file, m.id)
			b.AddressSample(l, []int64{int64(3 + i), int64(3+i) * tick}, mp, start+debuginfoSample)
		}
		p := b.Profile()
		return []*kgo.Record{{Key: []byte(host), Value: encode(t, p), Headers: meta(host).Headers()}}, cpuOf(p)
	}
}
