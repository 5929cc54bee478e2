package elfinfo

import (
	"os"
	"testing"

	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// The test binary itself is a typical Go binary (~10 MB, ~15k functions).
func BenchmarkExtract(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Extract(exe); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	d, err := Extract(exe)
	if err != nil {
		b.Fatal(err)
	}
	var size int
	for b.Loop() {
		v, _, err := Encode(d)
		if err != nil {
			b.Fatal(err)
		}
		size = len(v)
	}
	b.ReportMetric(float64(len(d.Symbols)), "symbols")
	b.ReportMetric(float64(size), "bytes")
	_ = debuginfo.KindSymbols
}
