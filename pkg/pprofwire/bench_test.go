package pprofwire

import (
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest/symcorpus"
	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkRead is Tables.Read and ReadSample of every sample of the
// loadgen fleet's symbolized records (symcorpus, gunzipped first), one
// Tables reused. cpu-ns/op is the process's CPU per record.
//
//	go test -run '^$' -bench 'Read$' -benchtime 2000x ./pprofwire
func BenchmarkRead(b *testing.B) {
	raws := symcorpus.Protobufs(b)
	l := record.DefaultLimits()
	var tab Tables
	var s Sample
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpu()
	for i := range b.N {
		if err := tab.Read(raws[i%len(raws)], &l, nil); err != nil {
			b.Fatal(err)
		}
		for _, smp := range tab.Samples {
			if !tab.ReadSample(smp, &s) {
				b.Fatal("sample refused")
			}
		}
	}
	b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
}
