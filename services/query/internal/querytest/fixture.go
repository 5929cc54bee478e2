package querytest

import (
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// The fixture's stacks, root first.
var (
	StackWorkMemmove = []string{"main.main", "main.work", "runtime.memmove"}
	StackWork        = []string{"main.main", "main.work"}
	StackIdle        = []string{"main.main", "main.idle"}
	StackQuery       = []string{"main.main", "db.query"}
)

// Expected numbers of Fixture over [now-1h, now) for type cpu (nanoseconds).
const (
	FixtureTotal         = 3000 // all samples
	FixtureCheckoutTotal = 2000 // {service="checkout"}
	FixtureWeb1Total     = 1200 // {host="web-1"}
	FixtureWeb2Total     = 800  // {host="web-2"}
	FixtureWorkTotal     = 1800 // main.work inclusive
	FixtureWorkSelf      = 1500
	FixtureMemmoveSelf   = 300
	FixtureQuerySelf     = 1000
	FixtureIdleSelf      = 200

	// Per-minute service rollups: cores of each host.
	FixtureWeb1Cores = 0.5
	FixtureWeb2Cores = 1.0
	FixtureDB1Cores  = 2.0
	FixtureMemBytes  = 1 << 30 // memory of web-1 and of web-2

	// Per-stack rollups read by a flame graph over [H-24h30m, now), with
	// H = now truncated to the hour: an hourly window, a minute window
	// before it, and documents outside or already covered by the hourly one.
	FixtureLongTotal = 1050
	// A function that only the per-function rollups know.
	FixtureLongFunction      = "legacy.batch"
	FixtureLongFunctionTotal = 1000
	FixtureLongServiceTotal  = 2000 // hourly service rollup at H-23h
)

// Fixture returns documents with the numbers above, placed relative to now
// (truncated to the minute), for the names' indices.
func Fixture(names indices.Names, now time.Time) []Doc {
	t0 := now.UTC().Truncate(time.Minute)
	h := t0.Truncate(time.Hour)
	var docs []Doc
	ids := map[string]string{}
	for key, frames := range map[string][]string{"workmem": StackWorkMemmove, "work": StackWork, "idle": StackIdle, "query": StackQuery} {
		d, id := Stack(names, t0.Add(-2*time.Hour), frames...)
		docs = append(docs, d)
		ids[key] = id
	}
	// One stack at a time; Samples packs those of a profile and label set
	// into one document (web-1's two stacks share one).
	var samples []indices.SampleDoc
	sample := func(at time.Time, host, service, pod, stack string, v int64) {
		samples = append(samples, indices.SampleDoc{
			Timestamp: at, Type: "cpu", Host: host, Service: service, StackIDs: []string{ids[stack]}, Value: v, Count: v / 10,
			Labels: map[string]string{"k8s_pod": pod, "comm": service},
		})
	}
	for _, s := range []struct {
		ago      time.Duration
		web1Mem  int64
		web1Work int64
		web2Work int64
		web2Idle int64
		db1Query int64
	}{{50 * time.Minute, 200, 600, 400, 100, 700}, {20 * time.Minute, 100, 300, 200, 100, 300}} {
		at := t0.Add(-s.ago)
		sample(at, "web-1", "checkout", "checkout-abc", "workmem", s.web1Mem)
		sample(at, "web-1", "checkout", "checkout-abc", "work", s.web1Work)
		sample(at, "web-2", "checkout", "checkout-def", "work", s.web2Work)
		sample(at, "web-2", "checkout", "checkout-def", "idle", s.web2Idle)
		sample(at, "db-1", "db", "db-0", "query", s.db1Query)
	}
	// Outside the default range: must not count.
	sample(t0.Add(-2*time.Hour), "web-1", "checkout", "checkout-abc", "workmem", 5000)
	samples = append(samples, indices.SampleDoc{
		Timestamp: t0.Add(-50 * time.Minute), Type: "memory", Host: "web-1", Service: "checkout", Value: FixtureMemBytes,
		Labels: map[string]string{"k8s_pod": "checkout-abc"},
	})
	docs = append(docs, Samples(names, samples...)...)

	rollup := func(d indices.RollupDoc) { docs = append(docs, Rollup(names, d)) }
	for m := 1; m <= 60; m++ {
		at := t0.Add(-time.Duration(m) * time.Minute)
		for _, hs := range []struct {
			host, service string
			cores         float64
			mem           bool
		}{{"web-1", "checkout", FixtureWeb1Cores, true}, {"web-2", "checkout", FixtureWeb2Cores, true}, {"db-1", "db", FixtureDB1Cores, false}} {
			rollup(indices.RollupDoc{Timestamp: at, Resolution: "1m", Kind: "service", Type: "cpu", Service: hs.service, Host: hs.host,
				Value: int64(hs.cores * float64(time.Minute)), Cores: hs.cores, Samples: 6000})
			if hs.mem {
				rollup(indices.RollupDoc{Timestamp: at, Resolution: "1m", Kind: "service", Type: "memory", Service: hs.service, Host: hs.host,
					MemAvg: FixtureMemBytes, MemMax: FixtureMemBytes})
			}
		}
	}
	var stacks []indices.RollupDoc
	stackRollup := func(at time.Time, res, stack string, v int64) {
		stacks = append(stacks, indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindStack, Type: "cpu", Service: "checkout", Host: "web-1", StackIDs: []string{ids[stack]}, Value: v})
	}
	stackRollup(h.Add(-23*time.Hour), "1h", "workmem", 1000)           // inside, hourly
	stackRollup(h.Add(-24*time.Hour-15*time.Minute), "1m", "work", 50) // inside, partial hour at the start
	stackRollup(h.Add(-24*time.Hour-45*time.Minute), "1m", "idle", 7)  // before the range
	stackRollup(h.Add(-25*time.Hour), "1h", "idle", 999)               // its hour is not whole inside the range
	stackRollup(h.Add(-23*time.Hour+5*time.Minute), "1m", "work", 5)   // covered by the hourly window
	docs = append(docs, StackRollups(names, stacks)...)
	rollup(indices.RollupDoc{Timestamp: h.Add(-23 * time.Hour), Resolution: "1h", Kind: "function", Type: "cpu", Service: "checkout", Host: "web-1",
		Function: FixtureLongFunction, Self: FixtureLongFunctionTotal, Total: FixtureLongFunctionTotal})
	rollup(indices.RollupDoc{Timestamp: h.Add(-23 * time.Hour), Resolution: "1h", Kind: "service", Type: "cpu", Service: "checkout", Host: "web-1",
		Value: FixtureLongServiceTotal})
	return docs
}
