package convert

import (
	"bytes"
	"testing"
	"time"

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
