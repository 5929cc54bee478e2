package aggregate

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkFleetRecords is BenchmarkFleet from the record values (stored
// gzip pprof, as the symbolizer writes them) on: decoding included, as
// the consumer does, through record.DecodeProfileLimits and google/pprof's
// profile (general), or through a Decoder's wire tables (wire).
func BenchmarkFleetRecords(b *testing.B) {
	for _, path := range []string{"general", "wire"} {
		b.Run("path="+path, func(b *testing.B) { benchFleetRecords(b, path == "wire") })
	}
}

func benchFleetRecords(b *testing.B, wire bool) {
	const hosts = 20
	profs, hostOf := fleetProfiles(hosts, 12) // 2 minutes of 20 hosts
	// Every pass over the profiles is 2 minutes later, as in BenchmarkFleet.
	var values [][]byte
	for pass := 0; pass*len(profs) < b.N; pass++ {
		for _, pr := range profs {
			p := pr.Copy()
			p.TimeNanos += int64(pass) * int64(2*time.Minute)
			v, err := record.EncodeProfileStored(p)
			if err != nil {
				b.Fatal(err)
			}
			values = append(values, v)
		}
	}
	cfg := Config{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, Names: indices.Default, Now: time.Now,
		Budget: &Budget{MaxBytes: DefaultMaxStateBytes}}
	p := NewPartition(cfg, Checkpoint{})
	dec := NewDecoder(record.DefaultLimits())
	limits := record.DefaultLimits()
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for i := 0; i < b.N; i++ {
		var in Input
		var err error
		if wire {
			in, err = dec.Decode(values[i])
		} else {
			in.Profile, err = record.DecodeProfileLimits(values[i], limits)
		}
		if err != nil {
			b.Fatal(err)
		}
		in.Type, in.Host, in.Offset = record.ProfileCPU, hostOf[i%len(profs)], int64(i)
		if _, err := p.Add(in); err != nil {
			b.Fatal(err)
		}
		if i%hosts == hosts-1 {
			benchFlush(b, p)
		}
	}
	per := float64(cpuTime()-start) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/profile")
	b.ReportMetric(10e9/per, "hosts/core")
	encodedBytes = 0
}
