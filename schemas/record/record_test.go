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

func FuzzDecodeProfile(f *testing.F) {
	b, _ := EncodeProfile(testProfile())
	f.Add(b)
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := DecodeProfile(in)
		if err == nil && p == nil {
			t.Fatal("nil profile without error")
		}
	})
}
