package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/services/ctl/internal/loadgen"
)

// soakEvery is how often the soak samples RSS and lag.
const soakEvery = 30 * time.Second

// soak is part F: the fleet part B found sustainable, at speed 1 for
// o.soak, with every process's RSS and every group's lag sampled; then the
// soak's totals. RSS counts as flat when a service's RSS at the end is at
// most 10% above its RSS after the warm-up: the first sixth of the run, or
// longer for a service with bounded caches (warmUp).
func (b *bench) soak(ctx context.Context) error {
	o := b.o
	hosts := o.soakHosts
	if hosts == 0 {
		hosts = b.best
	}
	if hosts == 0 {
		fmt.Println("\n## F. Soak: skipped, part B found no bounded fleet and -soak-hosts is 0")
		return nil
	}
	fmt.Printf("\n## F. Soak: %d hosts for %v at speed 1; RSS and lag every %v; flat = RSS at the end <= 1.1 x RSS after the first sixth\n", hosts, o.soak, soakEvery)
	cfg := loadgen.DefaultConfig()
	cfg.Hosts, cfg.Duration, cfg.Speed = hosts, o.soak, 1
	// The soak goes on with part B's fleet (same host names and seed):
	// its totals are those of the minutes from its start on, so it starts
	// on a minute boundary, after every minute part B's profiles touched.
	cfg.HostPrefix = b.id + "-s-"
	cfg.Seed = 100
	sleep(ctx, time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)))
	produced0 := b.produced.Load()
	dlq0 := b.dlqCount()
	bound := int64(2*hosts) + 50
	t0 := time.Now()
	since := t0.Truncate(time.Minute)
	soakCtx, done := context.WithCancel(ctx)
	samples := make(chan []rssSample, 1)
	go func() { samples <- b.sampleRSS(soakCtx, t0, bound) }()
	sum, err := b.loadgen(ctx, cfg)
	done()
	rss := <-samples
	if err != nil {
		return err
	}
	if err := b.waitDrained(ctx, o.drain); err != nil {
		return err
	}
	sleep(ctx, 70*time.Second)
	want := b.produced.Load() - produced0
	rollup, err := b.eventually(ctx, want, 3*time.Minute, func() (int64, error) { return b.rollupCPU(ctx, cfg.HostPrefix, since) })
	if err != nil {
		return err
	}
	samplesCPU, err := b.eventually(ctx, want, 3*time.Minute, func() (int64, error) { return b.samplesCPU(ctx, cfg.HostPrefix, since) })
	if err != nil {
		return err
	}

	fmt.Println("| process | warm-up until | RSS MiB after warm-up | at the end | max | end / warm-up | end / first sixth | flat | bounded caches at the end (entries / bound) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	flat := true
	var names []string
	if len(rss) > 0 {
		for name := range rss[len(rss)-1].rss {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		warm, why := warmUp(rss, name)
		sixth := rss[len(rss)/6].rss[name]
		w, e := rss[warm].rss[name], rss[len(rss)-1].rss[name]
		var m float64
		for _, s := range rss {
			m = max(m, s.rss[name])
		}
		ok := w > 0 && e <= 1.1*w
		verdict := fmt.Sprint(ok)
		switch {
		case name == "kafka" || name == "opensearch":
			verdict += " (JVM, not judged)" // JVM heaps grow to their -Xmx by design
		case why == warmFilling:
			verdict = "not judged: bounded caches still filling"
		default:
			flat = flat && ok
		}
		warmRSS, ratio := fmt.Sprintf("%.1f", w), fmt.Sprintf("%.2f", e/w)
		if why == warmFilling {
			warmRSS, ratio = "-", "-"
		}
		fmt.Printf("| %s | %v (%s) | %s | %.1f | %.1f | %s | %.2f | %s | %s |\n",
			name, rss[warm].at.Round(time.Second), why, warmRSS, e, m, ratio, e/sixth, verdict, cacheFills(rss[len(rss)-1].caches[name]))
	}
	var maxLag [3]int64
	for _, s := range rss {
		for i := range maxLag {
			maxLag[i] = max(maxLag[i], s.lag[i])
		}
	}
	lagOK := maxLag[0] <= bound && maxLag[1] <= bound && maxLag[2] <= bound
	dlq := b.dlqCount() - dlq0
	fmt.Printf("samples: %d over %v of load; lag max (symbolizer/indexer/rollup) %v, bound %d: %v; DLQ %d; loadgen behind %v\n",
		len(rss), soakSpan(rss), maxLag, bound, lagOK, dlq, sum.Behind.Round(10*time.Millisecond))
	fmt.Printf("totals: rollup %d, samples %d, produced %d: exact=%v; RSS flat=%v\n", rollup, samplesCPU, want, rollup == want && samplesCPU == want, flat)
	if rollup != want || samplesCPU != want {
		return fmt.Errorf("soak: totals not exact (rollup %d, samples %d, produced %d)", rollup, samplesCPU, want)
	}
	return nil
}

// soakSpan is the time the samples cover.
func soakSpan(rss []rssSample) time.Duration {
	if len(rss) == 0 {
		return 0
	}
	return rss[len(rss)-1].at.Round(time.Second)
}

type rssSample struct {
	at     time.Duration
	rss    map[string]float64 // MiB by process
	lag    [3]int64
	caches map[string]map[string]cacheFill // by process, then cache
}

// cacheFill is a bounded cache's entries and the entries it is cleared at,
// from a service's <service>_cache_entries and _cache_max_entries gauges.
type cacheFill struct{ entries, max float64 }

// Why a warm-up ends where it does.
const (
	warmSixth   = "first sixth"
	warmCaches  = "bounded caches full"
	warmFilling = "bounded caches not full before the last sixth"
)

// warmUp is the sample after which a process's RSS is judged: the one after
// the first sixth of the soak, or later the first one by which every
// bounded cache the process reports has been full (at 90% of its bound) or
// cleared (fewer entries than in the sample before) at least once. Until
// then its memory grows by design, up to the caches' bounds
// (docs/INDEXER.md "Memory"): a cache that fills with a fleet's distinct
// stacks of the day takes hours to. When that is not before the last sixth,
// too little is left to judge: the last sample, warmFilling.
func warmUp(rss []rssSample, name string) (int, string) {
	first := len(rss) / 6
	full := map[string]bool{}
	for i, s := range rss {
		for c, f := range s.caches[name] {
			prev, ok := rss[max(i-1, 0)].caches[name][c]
			if f.entries >= 0.9*f.max || (ok && f.entries < prev.entries) {
				full[c] = true
			}
		}
		if len(full) == len(s.caches[name]) && i >= first {
			if len(full) == 0 || i == first {
				return i, warmSixth
			}
			if i > len(rss)*5/6 {
				break
			}
			return i, warmCaches
		}
	}
	if len(rss[len(rss)-1].caches[name]) == 0 {
		return first, warmSixth
	}
	return len(rss) - 1, warmFilling
}

// cacheFills prints a process's caches as "name entries / bound".
func cacheFills(caches map[string]cacheFill) string {
	if len(caches) == 0 {
		return "-"
	}
	var out []string
	for c, f := range caches {
		out = append(out, fmt.Sprintf("%s %.0f / %.0f", c, f.entries, f.max))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// readCaches reads the bounded caches an instance reports: the series
// <prefix>_cache_entries{cache="..."} and <prefix>_cache_max_entries.
func (b *bench) readCaches(inst string) map[string]cacheFill {
	out := map[string]cacheFill{}
	for _, l := range metricLines("http://"+b.addrOf(inst)+"/metrics", "_cache_entries{cache=", "_cache_max_entries{cache=") {
		name, value, ok := strings.Cut(l, " ")
		_, cache, ok2 := strings.Cut(name, `{cache="`)
		if !ok || !ok2 {
			continue
		}
		cache = strings.TrimSuffix(cache, `"}`)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		f := out[cache]
		if strings.Contains(name, "_cache_max_entries{") {
			f.max = v
		} else {
			f.entries = v
		}
		out[cache] = f
	}
	return out
}

// sampleRSS records every process's RSS and the lags every soakEvery, and
// prints a progress line every 5 minutes.
func (b *bench) sampleRSS(ctx context.Context, t0 time.Time, bound int64) []rssSample {
	var out []rssSample
	t := time.NewTicker(soakEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		s := rssSample{at: time.Since(t0), rss: map[string]float64{}}
		pids := b.pids()
		for _, q := range b.instances("stackstream-query") {
			b.mu.Lock()
			if c := b.procs[q]; c != nil {
				pids[q] = c.Process.Pid
			}
			b.mu.Unlock()
		}
		s.caches = map[string]map[string]cacheFill{}
		for name, pid := range pids {
			s.rss[name] = rssMiB(pid)
			if _, ok := counterSeries[serviceOf(name)]; ok {
				s.caches[name] = b.readCaches(name)
			}
		}
		s.lag, _ = b.lags(ctx)
		out = append(out, s)
		if len(out)%int(5*time.Minute/soakEvery) == 0 {
			var parts []string
			for _, name := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query"} {
				parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(name, "stackstream-"), s.rss[name]))
			}
			fmt.Printf("  soak %v: RSS MiB %s; lag %v (bound %d); indexer caches %s\n", s.at.Round(time.Second), strings.Join(parts, ", "), s.lag, bound,
				cacheFills(s.caches["stackstream-indexer"]))
		}
	}
}

// rssMiB reads a process's resident set from /proc; 0 if it is gone.
func rssMiB(pid int) float64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(s, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
