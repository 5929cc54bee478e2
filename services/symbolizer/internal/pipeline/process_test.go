package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

func fuzzProcessor(t testing.TB) *Processor {
	store := source.NewTopic(1<<20, nil)
	v, err := debuginfo.Encode(&debuginfo.File{BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x800, Name: "_ZN1a1bEv"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Apply([]byte("aa11"), v); err != nil {
		t.Fatal(err)
	}
	chain := source.NewChain(source.Options{MissTTL: time.Minute}, store)
	return &Processor{Symbolizer: &symbolize.Symbolizer{Tables: chain}, Topics: record.TopicsFor("f."), MaxOutputBytes: 1 << 20}
}

// FuzzProcess feeds arbitrary record values (and schema headers) to the
// processor: it must never panic, and must either produce a profile that
// decodes or a DLQ record that keeps the value as it was.
func FuzzProcess(f *testing.F) {
	b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	m := b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
	b.AddressSample(map[string]string{"pid": "1"}, []int64{1, 2}, m, 0x7f0000000010, 0x7f0000000ff0)
	b.Sample(nil, []int64{1, 2}, "kernel_fn")
	good, err := record.EncodeProfile(b.Profile())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "1")
	f.Add([]byte("not gzip"), "1")
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, "1")
	f.Add(good, "2")
	p := fuzzProcessor(f)
	f.Fuzz(func(t *testing.T, value []byte, version string) {
		h := record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers()
		h[0].Value = []byte(version)
		in := &kgo.Record{Topic: "f.profiles.raw", Key: []byte("k"), Value: value, Headers: h}
		res := p.Process(context.Background(), in)
		if res.Reason == "panic" {
			t.Fatalf("processing panicked: %v", res.Err)
		}
		if res.Err != nil && res.Parts == 0 {
			if len(res.Out) != 1 || res.Out[0].Topic != "f.dlq" || string(res.Out[0].Value) != string(value) {
				t.Fatalf("dlq record changed the value or went elsewhere: %d records", len(res.Out))
			}
			return
		}
		for _, o := range res.Out {
			if o.Topic != "f.profiles.symbolized" {
				continue
			}
			out, err := record.DecodeProfile(o.Value)
			if err != nil {
				t.Fatalf("output does not decode: %v", err)
			}
			for _, loc := range out.Location {
				if len(loc.Line) == 0 {
					t.Fatalf("location %d left without a line", loc.ID)
				}
			}
		}
	})
}

// manySamples is a profile whose stored encoding is a few times its gzip one.
func manySamples() []byte {
	b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	for i := 0; i < 500; i++ {
		b.Sample(map[string]string{"i": string(rune('a' + i%26))}, []int64{1, 2}, "fn"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	v, _ := record.EncodeProfile(b.Profile())
	return v
}

func TestProcessWritesStoredGzip(t *testing.T) {
	p := fuzzProcessor(t)
	in := manySamples()
	res := p.Process(context.Background(), &kgo.Record{Topic: "f.profiles.raw", Value: in, Headers: record.Meta{Type: record.ProfileCPU}.Headers()})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	prof, err := record.DecodeProfile(res.Out[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	want, err := record.EncodeProfileStored(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Out) != 1 || len(res.Out[0].Value) != len(want) || len(res.Out[0].Value) < 2*len(in) {
		t.Fatalf("output is %d bytes, want the stored encoding (%d bytes; input gzip %d)", len(res.Out[0].Value), len(want), len(in))
	}
}

func TestProcessCompressesWhenStoredIsTooLarge(t *testing.T) {
	p := fuzzProcessor(t)
	in := manySamples()
	res := p.Process(context.Background(), &kgo.Record{Topic: "f.profiles.raw", Value: in, Headers: record.Meta{Type: record.ProfileCPU}.Headers()})
	stored := len(res.Out[0].Value)
	p.MaxOutputBytes = stored - 1 + (p.MaxOutputBytes - p.valueLimit(res.Out[0]))
	res = p.Process(context.Background(), &kgo.Record{Topic: "f.profiles.raw", Value: in, Headers: record.Meta{Type: record.ProfileCPU}.Headers()})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Out) != 1 || len(res.Out[0].Value) >= stored/2 {
		t.Fatalf("output is %d records, %d bytes, want one gzip-compressed (stored was %d)", len(res.Out), len(res.Out[0].Value), stored)
	}
	if _, err := record.DecodeProfile(res.Out[0].Value); err != nil {
		t.Fatal(err)
	}
}
