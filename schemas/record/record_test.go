package record

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"
)

func testProfile() *profile.Profile {
	fn := &profile.Function{ID: 1, Name: "main.work"}
	loc := &profile.Location{ID: 1, Address: 0x1234, Line: []profile.Line{{Function: fn, Line: 3}}}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		Sample:     []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{10}, Label: map[string][]string{"pid": {"1"}}}},
		Location:   []*profile.Location{loc},
		Function:   []*profile.Function{fn},
		TimeNanos:  1,
	}
}

func TestProfileRoundTrip(t *testing.T) {
	for name, encode := range map[string]func(*profile.Profile) ([]byte, error){"compressed": EncodeProfile, "stored": EncodeProfileStored} {
		b, err := encode(testProfile())
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodeProfile(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Sample[0].Value[0] != 10 || p.Sample[0].Location[0].Line[0].Function.Name != "main.work" {
			t.Fatalf("%s: decoded %v", name, p)
		}
		// What other pprof tools read: gzip around the protobuf.
		if _, err := profile.Parse(bytes.NewReader(b)); err != nil {
			t.Fatalf("%s: profile.Parse: %v", name, err)
		}
	}
}

func TestEncodeProfileStoredIsNotCompressed(t *testing.T) {
	p := testProfile()
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		t.Fatal(err)
	}
	b, err := EncodeProfileStored(p)
	if err != nil {
		t.Fatal(err)
	}
	// The protobuf is in the value as it is: stored deflate blocks.
	if !bytes.Contains(b, raw.Bytes()) {
		t.Fatalf("stored value (%d bytes) does not contain the %d-byte protobuf", len(b), raw.Len())
	}
}

func TestDecodeProfileRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"plain text", []byte("not a profile"), ErrNotGzip},
		{"truncated gzip", gzipLevel(t, []byte("xx"), gzip.DefaultCompression)[:5], ErrNotGzip},
		{"gzip of garbage", gzipLevel(t, []byte{0xff, 0xff, 0xff}, gzip.DefaultCompression), ErrNotPprof},
		{"oversized", gzipLevel(t, make([]byte, MaxProfileBytes+10), gzip.DefaultCompression), ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeProfile(tt.in); !errors.Is(err, tt.want) {
				t.Fatalf("DecodeProfile = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Type: ProfileCPU, Host: "web-1", AgentVersion: "dev"}
	got, err := ParseMeta(m.Headers())
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != ProfileCPU || got.Host != "web-1" || got.SchemaVersion != SchemaVersion {
		t.Fatalf("got %+v", got)
	}
}

func TestParseMetaRejects(t *testing.T) {
	tests := []struct {
		name    string
		headers []kgo.RecordHeader
		want    error
	}{
		{"no headers", nil, ErrMissingHeader},
		{"future version", []kgo.RecordHeader{{Key: HeaderSchemaVersion, Value: []byte("2")}}, ErrUnknownSchemaVersion},
		{"bad type", []kgo.RecordHeader{{Key: HeaderSchemaVersion, Value: []byte("1")}, {Key: HeaderProfileType, Value: []byte("gpu")}}, ErrUnknownProfileType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseMeta(tt.headers); !errors.Is(err, tt.want) {
				t.Fatalf("ParseMeta = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDeriveService(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"explicit wins", map[string]string{LabelService: "checkout", LabelSystemdUnit: "x.service"}, "checkout"},
		{"k8s workload", map[string]string{LabelK8sWorkload: "cart", LabelSystemdUnit: "x.service"}, "cart"},
		{"systemd unit", map[string]string{LabelSystemdUnit: "opensearch.service", LabelExecutable: "/usr/bin/java"}, "opensearch"},
		{"executable", map[string]string{LabelExecutable: "/usr/bin/python3", LabelComm: "py"}, "python3"},
		{"comm", map[string]string{LabelComm: "kworker"}, "kworker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DeriveService(tt.labels); got != tt.want {
				t.Fatalf("DeriveService = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzDecodeProfile feeds DecodeProfileLimits (gzip values) and
// ParseProfile (the same bytes as an uncompressed protobuf) anything: what
// they accept must be a profile pprof calls valid, every location of every
// sample defined, and no call may allocate more than the limits allow.
func FuzzDecodeProfile(f *testing.F) {
	l := DefaultLimits()
	l.MaxDecompressedBytes = 1 << 20
	l.MaxDecodeHeapBytes = 4 << 20
	// The decode's budget, the decompressed buffer grown up to three times
	// its size and copied once, and the gzip reader.
	bound := uint64(l.MaxDecodeHeapBytes) + 4*uint64(l.MaxDecompressedBytes) + 256<<10
	p := testProfile()
	var raw bytes.Buffer
	if err := p.WriteUncompressed(&raw); err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{raw.Bytes(), baseProfile(), baseProfile().bytes(fieldProfileSample, sample(1, []uint64{1, 1}, 2))} {
		f.Add(seed) // raw protobuf, for ParseProfile
		f.Add(gzipLevel(f, seed, gzip.BestSpeed))
		f.Add(gzipLevel(f, seed, gzip.NoCompression))
	}
	b, _ := EncodeProfile(p)
	f.Add(b)
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte{fieldProfileSample<<3 | wireBytes, 2, fieldSampleLocationID<<3 | wireVarint, 7})
	f.Fuzz(func(t *testing.T, in []byte) {
		check := func(name string, decode func() (*profile.Profile, error)) {
			var p *profile.Profile
			var err error
			got := allocated(func() { p, err = decode() })
			if got > bound {
				t.Fatalf("%s of %d bytes allocated %d bytes, bound %d", name, len(in), got, bound)
			}
			if err != nil {
				return
			}
			if p == nil {
				t.Fatalf("%s: nil profile without error", name)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatalf("%s accepted an invalid profile: %v", name, err)
			}
		}
		check("DecodeProfileLimits", func() (*profile.Profile, error) { return DecodeProfileLimits(in, l) })
		check("ParseProfile", func() (*profile.Profile, error) { return ParseProfile(in, l) })
	})
}

func TestFrameKind(t *testing.T) {
	for file, want := range map[string]string{
		"[kernel.kallsyms]": KindKernel, "[python]": KindPython, "[java]": KindJava,
		"[js]": KindJS, "[jit]": KindJIT, "/usr/bin/python3.11": KindNative, "": KindNative, "[vdso]": KindNative,
	} {
		if got := FrameKind(file); got != want {
			t.Errorf("FrameKind(%q) = %q, want %q", file, got, want)
		}
	}
}
