package convert

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

// FuzzPprof: whatever a client sends as pprof, Pprof refuses it or makes
// records every consumer decodes within the same limits.
func FuzzPprof(f *testing.F) {
	p := pproftest.NewCPU(time.Now(), time.Second).Sample(map[string]string{"k": "v"}, []int64{1, 2}, "a", "b").Profile()
	var gz, raw bytes.Buffer
	p.Write(&gz)
	p.WriteUncompressed(&raw)
	f.Add(gz.Bytes())
	f.Add(raw.Bytes())
	// With a mapping, as SDK profiles come: the rewrite's path, not the
	// parsed one (named frames without a mapping take that).
	m := &profile.Mapping{ID: 1, Start: 0x1000, Limit: 0x2000, File: "/bin/app", BuildID: "ab"}
	p.Mapping = []*profile.Mapping{m}
	for _, loc := range p.Location {
		loc.Mapping = m
	}
	p.Location = append(p.Location, &profile.Location{ID: 9, Mapping: m, Address: 0x1100})
	p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{p.Location[len(p.Location)-1]}, Value: []int64{3, 4},
		Label: map[string][]string{"tenant": {"x"}}})
	p.DropFrames, p.Comments = "runtime\\..*", []string{"c"}
	var mapped bytes.Buffer
	p.WriteUncompressed(&mapped)
	f.Add(mapped.Bytes())
	l := record.DefaultLimits()
	l.MaxSamples, l.MaxLocations, l.MaxFunctions, l.MaxStrings, l.MaxDecodeHeapBytes = 64, 64, 64, 256, 1<<20
	l.MaxDecompressedBytes = 1 << 16
	o := Options{Limits: l, MaxClockSkew: time.Hour, MaxRecordBytes: 1 << 20, Now: time.Now}
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Pprof(data, Push{Service: "s", Tags: nil}, o)
		if err != nil {
			return
		}
		for _, r := range recs {
			if _, err := record.DecodeProfileLimits(r.Value, l); err != nil {
				t.Fatalf("record from %x does not decode: %v", data, err)
			}
		}
	})
}
