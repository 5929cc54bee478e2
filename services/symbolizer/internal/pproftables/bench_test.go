package pproftables

import (
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest/symcorpus"
	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkDecodeAppend is Decode and Append of the loadgen fleet's
// symbolized records (pkg/pproftest/symcorpus, gunzipped first), one
// Profile reused as the symbolizer reuses it. One op is one record;
// cpu-ns/op is the process's CPU (user + sys, GC included), steadier than
// the wall time on a shared machine.
//
//	go test -run '^$' -bench DecodeAppend -count 5 ./internal/pproftables
func BenchmarkDecodeAppend(b *testing.B) {
	raws := symcorpus.Protobufs(b)
	lim := record.DefaultLimits()
	var p Profile
	var out []byte
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU(b)
	for i := range b.N {
		if err := p.Decode(raws[i%len(raws)], lim); err != nil {
			b.Fatal(err)
		}
		out = p.Append(out[:0])
	}
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
