package convert

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

func fixture(b *testing.B) []byte {
	data, err := os.ReadFile("../../testdata/sdk/service-cpu.pprof")
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkPprofSteps splits a push of the service fixture into its steps.
func BenchmarkPprofSteps(b *testing.B) {
	data := fixture(b)
	l := record.DefaultLimits()
	raw, _ := Gunzip(data, l.MaxDecompressedBytes)
	labels := map[string]string{"service": "svc", "env": "prod", "session_id": "abc", "process_runtime_name": "go"}
	stampNow := func(t, d int64) (int64, int64, error) { return t, d, nil }
	out, _, _ := rewriteWire(raw, labels, stampNow)
	b.Run("gunzip", func(b *testing.B) {
		buf := new(bytes.Buffer)
		for b.Loop() {
			gunzipInto(buf, data, l.MaxDecompressedBytes)
		}
	})
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			l.Check(raw)
		}
	})
	b.Run("rewrite", func(b *testing.B) {
		for b.Loop() {
			rewriteWire(raw, labels, stampNow)
		}
	})
	b.Run("gzip-stored", func(b *testing.B) {
		for b.Loop() {
			gzipBytes(out)
		}
	})
	b.Run("whole", func(b *testing.B) {
		opts := Options{Limits: l, MaxClockSkew: time.Hour, MaxRecordBytes: 1 << 20, Now: time.Now}
		for b.Loop() {
			if _, err := Pprof(data, Push{Service: "svc"}, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parsed-path", func(b *testing.B) {
		opts := Options{Limits: l, MaxClockSkew: time.Hour, MaxRecordBytes: 1 << 20, Now: time.Now}
		for b.Loop() {
			p, _ := profile.ParseData(data)
			if _, err := Records(Push{Profile: p, Service: "svc"}, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Logf("raw %d bytes, out %d bytes", len(raw), len(out))
}
