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

// The soak samples RSS and lag every soakEvery of simulated time, but no
// closer than soakMinEvery of real time (a catch-up soak at speed 6 every
// 5 s, as part B samples lag).
const (
	soakEvery    = 30 * time.Second
	soakMinEvery = 5 * time.Second
)

// soakStep is the real time between the soak's samples at a speed.
func soakStep(speed float64) time.Duration {
	return max(time.Duration(float64(soakEvery)/speed), soakMinEvery)
}

// hourMinute is the minute of each simulated hour at which the soak
// compares RSS hour over hour: late in the hour, where its state is near
// its largest, and long after the ended hour was written and its frozen
// copy dropped (lateness 2 m + retention 10 m past the hour).
const hourMinute = 50 * time.Minute

// hourSpan is how far from hourMinute the samples of an hour's median
// lie: minutes 45 to 55, 20 samples at speeds up to 6 (soakStep).
const hourSpan = 5 * time.Minute

// soak is part F: the fleet part B found sustainable (or -soak-hosts), for
// o.soak of simulated time at o.soakSpeed, with every process's RSS and
// every group's lag sampled; then the soak's totals. RSS counts as flat
// when a service's RSS at the end is at most 10% above its RSS after the
// warm-up: the first sixth of the run, or longer for a service with
// bounded caches (warmUp); each a median over 10 simulated minutes. The
// rollup's state follows its UTC hour, so RSS also grows within an hour by
// design: hourOverHour compares the same minutes of successive simulated
// hours.
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
	cfg := loadgen.DefaultConfig()
	cfg.Hosts, cfg.Duration, cfg.Speed = hosts, o.soak, o.soakSpeed
	step := soakStep(cfg.Speed)
	simStep := time.Duration(float64(step) * cfg.Speed)
	fmt.Printf("\n## F. Soak: %d hosts for %v of simulated time at speed %g (%v real, ending at the wall clock); RSS and lag every %v (%v simulated); flat = median RSS over the last 10 simulated minutes <= 1.1 x over the 10 after the warm-up (the first sixth, or until bounded caches were full once); flat hour over hour = median RSS over minutes %d-%d of each later simulated hour <= 1.1 x the first's (if not, <= 1.1 x the largest hour until the first after the process's bounded caches were full once)\n",
		hosts, cfg.Duration, cfg.Speed, cfg.Span().Round(time.Second), step, simStep, int((hourMinute - hourSpan).Minutes()), int((hourMinute + hourSpan).Minutes()))
	// The soak goes on with part B's fleet (same host names and seed):
	// its totals are those of the minutes from its simulated start on, so
	// that start is on a minute boundary, after every minute part B's
	// profiles touched. (A catch-up soak is stamped back from the wall
	// clock, over those minutes: run starts it before part B.) Simulated
	// and wall start differ by a constant (loadgen's SimStart), so the
	// wait for the next minute is the same in both.
	cfg.HostPrefix = b.id + "-s-"
	cfg.Seed = 100
	start := cfg.SimStart(time.Now())
	sleep(ctx, start.Truncate(time.Minute).Add(time.Minute).Sub(start))
	produced0 := b.produced.Load()
	dlq0 := b.dlqCount()
	// One interval of the fleet's records, as in part B: at speed s an
	// interval of real time carries s intervals of each host.
	bound := int64(float64(2*hosts)*cfg.Speed) + 50
	t0 := time.Now()
	// loadgen's Summary.From but for the time between t0 and Run's first
	// clock read (microseconds, x speed).
	from := cfg.SimStart(t0)
	since := from.Truncate(time.Minute)
	soakCtx, done := context.WithCancel(ctx)
	samples := make(chan []rssSample, 1)
	go func() { samples <- b.sampleRSS(soakCtx, cfg, t0, step, bound) }()
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

	fmt.Println("| process | warm-up until | RSS MiB after warm-up | at the end (medians) | max | end / warm-up | end / first sixth | flat | bounded caches at the end (entries / bound) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	flat := true
	var names []string
	if len(rss) > 0 {
		for name := range rss[len(rss)-1].rss {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	// Each RSS compared is a median over 10 simulated minutes of samples
	// from its point (the last ones for the end), as hour over hour.
	k := max(int(2*hourSpan/simStep), 1)
	around := func(i int) []rssSample { return rss[max(min(i, len(rss)-k), 0):min(i+k, len(rss))] }
	for _, name := range names {
		warm, why := warmUp(rss, name)
		sixth := medianRSS(around(len(rss)/6), name)
		w, e := medianRSS(around(warm), name), medianRSS(around(len(rss)), name)
		var m float64
		for _, s := range rss {
			m = max(m, s.rss[name])
		}
		ok := w > 0 && e <= 1.1*w
		verdict := fmt.Sprint(ok)
		switch {
		case jvm(name):
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
	hours := hourOverHour(rss, from, from.Add(cfg.Duration), hourMinute, hourSpan)
	printHourly(hours, from, from.Add(cfg.Duration))
	hourVerdict := "not judged"
	if hours.judged {
		hourVerdict = fmt.Sprint(hours.flat)
		if n := hours.unjudged(); len(n) > 0 {
			hourVerdict += " (not judged: " + strings.Join(n, ", ") + ")"
		}
	}
	maxLag, over := lagPeaks(rss, bound)
	lagOK := maxLag[0] <= bound && maxLag[1] <= bound && maxLag[2] <= bound
	if !lagOK {
		fmt.Printf("lag over the bound %d: %s\n", bound, strings.Join(over, "; "))
	}
	dlq := b.dlqCount() - dlq0
	fmt.Printf("samples: %d over %v of load (%v simulated); lag max (symbolizer/indexer/rollup) %v, bound %d: %v; DLQ %d; loadgen behind %v\n",
		len(rss), soakSpan(rss), time.Duration(float64(soakSpan(rss))*cfg.Speed), maxLag, bound, lagOK, dlq, sum.Behind.Round(10*time.Millisecond))
	fmt.Printf("totals: rollup %d, samples %d, produced %d: exact=%v; RSS flat=%v, flat hour over hour=%s\n", rollup, samplesCPU, want, rollup == want && samplesCPU == want, flat, hourVerdict)
	if rollup != want || samplesCPU != want {
		return fmt.Errorf("soak: totals not exact (rollup %d, samples %d, produced %d)", rollup, samplesCPU, want)
	}
	return nil
}

// lagPeaks is each group's (symbolizer, indexer, rollup) largest lag over
// the samples, and for each group that passed bound when it peaked (real
// and simulated time) and in how many samples: so that a peak can be laid
// beside the services' logs and the hour's writes.
func lagPeaks(rss []rssSample, bound int64) (peak [3]int64, over []string) {
	var at [3]int
	var n [3]int
	for j, s := range rss {
		for i := range peak {
			if s.lag[i] > peak[i] {
				peak[i], at[i] = s.lag[i], j
			}
			if s.lag[i] > bound {
				n[i]++
			}
		}
	}
	for i, name := range []string{"symbolizer", "indexer", "rollup"} {
		if peak[i] > bound {
			s := rss[at[i]]
			over = append(over, fmt.Sprintf("%s %d at %v (simulated %s UTC), %d of %d samples over", name, peak[i], s.at.Round(time.Second), s.sim.UTC().Format("15:04:05"), n[i], len(rss)))
		}
	}
	return peak, over
}

// soakSpan is the time the samples cover.
func soakSpan(rss []rssSample) time.Duration {
	if len(rss) == 0 {
		return 0
	}
	return rss[len(rss)-1].at.Round(time.Second)
}

type rssSample struct {
	at     time.Duration      // real time since the soak's start
	sim    time.Time          // simulated time then
	rss    map[string]float64 // MiB by process
	lag    [3]int64
	caches map[string]map[string]cacheFill // by process, then cache
}

// stateSuffix names the rollup's charged state (MiB of its state budget in
// use) among the processes' RSS: sampled and judged as they are.
const stateSuffix = " state"

// windowsSuffix names the part of the rollup's charged state that is not
// its stack cache (a bounded cache that fills over hours as a fleet
// deploys new binaries): its windows, which should be flat from the first
// hour on.
const windowsSuffix = " state less stack cache"

// stackCacheName is the rollup's stack cache among its bounded caches.
const stackCacheName = "stacks MiB"

// cacheFill is a bounded cache's entries and the entries it is cleared at,
// from a service's <service>_cache_entries and _cache_max_entries gauges;
// or, for the rollup's stack cache (bounded by the state budget it shares
// with the windows), its MiB and whether it ever gave way to the windows.
type cacheFill struct {
	entries, max float64
	gaveWay      bool
}

// Why a warm-up ends where it does.
const (
	warmSixth   = "first sixth"
	warmCaches  = "bounded caches full"
	warmFilling = "bounded caches not full before the last sixth"
)

// warmUp is the sample after which a process's RSS is judged: the one after
// the first sixth of the soak, or later the first one by which every
// bounded cache the process reports has been full (at 90% of its bound, or
// given way) or cleared (fewer entries than in the sample before) at least once. Until
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
			if f.gaveWay || (f.max > 0 && f.entries >= 0.9*f.max) || (ok && f.entries < prev.entries) {
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

// jvm says whether a process is a JVM: Kafka's and OpenSearch's heaps grow
// to their -Xmx by design, so their RSS is printed, not judged.
func jvm(name string) bool { return name == "kafka" || name == "opensearch" }

// hourly is the soak's RSS hour over hour.
type hourly struct {
	at     []time.Time // simulated time of each hour's minute compared
	n      []int       // samples in each hour's window
	rows   []hourlyRow // by process name; none unless two hours were sampled
	judged bool        // two hours or more sampled
	flat   bool        // judged, and every row but the JVMs' judged and flat
}

type hourlyRow struct {
	name        string
	rss         []float64 // median MiB in each hour's window, as at
	first       int       // the first hour compared: 0, or the first after the process's warm-up
	base        float64   // what later hours are compared with: the largest hour up to first
	last, worst float64   // the last hour's and the largest later hour's RSS over base
	judged      bool      // an hour after first to compare
	flat        bool      // judged and worst <= 1.1
}

// hourOverHour compares each process's RSS at the same minute of
// successive simulated hours of a soak that covered [from, to]. An hour
// counts when the soak covered it whole and the hour before it at least in
// part: the soak's first hour, partial or whole, is the warm-up, since the
// rollup holds an ended hour until written and frozen only from the second
// on. Each hour's value is the median of the samples within span of that
// minute (and within the hour): one sample swings with the collector's
// cycle (the rollup's RSS by 25% within minutes on 2026-12-03); an hour
// without a sample there is left out.
//
// A process is flat when every later hour's RSS is at most 1.1 times its
// first hour's. If not, its growth is excused only up to its bounded
// caches' bounds: it is compared again from its first hour after its
// warm-up (warmUp: every cache full or cleared once) against the largest
// hour up to then, the peak its caches' filling reached, which a process
// whose caches are bounded should not pass by more than 10% (a cache
// cleared at its bound drops and refills below it). It is not judged when
// its caches never filled or no hour follows.
func hourOverHour(rss []rssSample, from, to time.Time, minute, span time.Duration) hourly {
	var h hourly
	var windows [][]rssSample
	// Truncate counts from the zero time, so it cuts at UTC hours; the
	// hour after from's is the first whose hour before was covered.
	for hour := from.Truncate(time.Hour).Add(time.Hour); !hour.Add(time.Hour).After(to); hour = hour.Add(time.Hour) {
		target := hour.Add(minute)
		var w []rssSample
		for _, s := range rss {
			if !s.sim.Before(hour) && s.sim.Before(hour.Add(time.Hour)) && s.sim.Sub(target).Abs() <= span {
				w = append(w, s)
			}
		}
		if len(w) > 0 {
			windows = append(windows, w)
			h.at = append(h.at, target)
			h.n = append(h.n, len(w))
		}
	}
	if h.judged = len(windows) >= 2; !h.judged {
		return h
	}
	var names []string
	for name := range windows[len(windows)-1][0].rss {
		names = append(names, name)
	}
	sort.Strings(names)
	h.flat = true
	for _, name := range names {
		r := hourlyRow{name: name}
		for _, w := range windows {
			r.rss = append(r.rss, medianRSS(w, name))
		}
		r.judge(0)
		if warm, why := warmUp(rss, name); !r.flat {
			r.judged = false
			for i, w := range windows {
				if why != warmFilling && !w[0].sim.Before(rss[warm].sim) {
					r.judge(i)
					break
				}
			}
		}
		if !jvm(name) {
			h.flat = h.flat && r.flat
		}
		h.rows = append(h.rows, r)
	}
	return h
}

// unjudged is the processes (JVMs aside) whose hours were not judged: flat
// is false while there are any, whatever the others show.
func (h hourly) unjudged() []string {
	var names []string
	for _, r := range h.rows {
		if !r.judged && !jvm(r.name) {
			names = append(names, r.name)
		}
	}
	return names
}

// medianRSS is the median of a process's RSS over samples.
func medianRSS(samples []rssSample, name string) float64 {
	v := make([]float64, 0, len(samples))
	for _, s := range samples {
		v = append(v, s.rss[name])
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// judge compares the row's hours after first with the largest of its hours
// up to first; a row with no hour after first is not judged.
func (r *hourlyRow) judge(first int) {
	r.first, r.judged, r.flat, r.worst, r.base = first, first < len(r.rss)-1, false, 0, 0
	if !r.judged {
		return
	}
	for _, v := range r.rss[:first+1] {
		r.base = max(r.base, v)
	}
	for _, v := range r.rss[first+1:] {
		r.worst = max(r.worst, v/r.base)
	}
	r.last = r.rss[len(r.rss)-1] / r.base
	r.flat = r.base > 0 && r.worst <= 1.1
}

// printHourly prints the soak's hour-over-hour table, or why there is none.
func printHourly(h hourly, from, to time.Time) {
	m, w := int(hourMinute.Minutes()), int(hourSpan.Minutes())
	if !h.judged {
		fmt.Printf("hour over hour: not judged: the soak's simulated %s covers %d whole hour(s) after a covered one with samples within %d minutes of minute %d; 2 needed (-soak 3h gives 2 from any start)\n",
			hoursNote(from, to), len(h.at), w, m)
		return
	}
	fmt.Printf("hour over hour: median RSS MiB over minutes %d-%d of each simulated hour covered whole after a covered one (its samples in brackets); simulated %s\n", m-w, m+w, hoursNote(from, to))
	head, rule := "| process |", "|---|"
	for i, at := range h.at {
		head += fmt.Sprintf(" %s (%d) |", at.UTC().Format("15:04"), h.n[i])
		rule += "---|"
	}
	fmt.Println(head + " compared with | last / base | max / base | flat hour over hour |")
	fmt.Println(rule + "---|---|---|---|")
	for _, r := range h.rows {
		line := "| " + r.name + " |"
		for _, v := range r.rss {
			line += fmt.Sprintf(" %.1f |", v)
		}
		if !r.judged {
			fmt.Printf("%s - | - | - | not judged: it grew while its bounded caches filled, with no hour after they were full |\n", line)
			continue
		}
		base := "the first hour"
		if r.first > 0 {
			base = fmt.Sprintf("the largest hour to %s (caches full by then): %.1f", h.at[r.first].UTC().Format("15:04"), r.base)
		}
		verdict := fmt.Sprint(r.flat)
		if jvm(r.name) {
			verdict += " (JVM, not judged)"
		}
		fmt.Printf("%s %s | %.2f | %.2f | %s |\n", line, base, r.last, r.worst, verdict)
	}
}

// cacheFills prints a process's caches as "name entries / bound".
func cacheFills(caches map[string]cacheFill) string {
	if len(caches) == 0 {
		return "-"
	}
	var out []string
	for c, f := range caches {
		switch {
		case f.max > 0:
			out = append(out, fmt.Sprintf("%s %.0f / %.0f", c, f.entries, f.max))
		case f.gaveWay:
			out = append(out, fmt.Sprintf("%s %.0f (gave way)", c, f.entries))
		default:
			out = append(out, fmt.Sprintf("%s %.0f (never gave way)", c, f.entries))
		}
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

// rollupState reads, from one page of the rollup's metrics, its stack
// cache (its MiB, and whether it ever gave way to the window state or was
// reset: its bound reached) and its charged state in MiB.
func (b *bench) rollupState(inst string) (cache cacheFill, stateMiB float64) {
	var gave float64
	for _, l := range metricLines("http://"+b.addrOf(inst)+"/metrics", "stackstream_rollup_stack_cache_", "stackstream_rollup_state_bytes ") {
		name, value, _ := strings.Cut(l, " ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "stackstream_rollup_stack_cache_bytes":
			cache.entries = v / (1 << 20)
		case `stackstream_rollup_stack_cache_events_total{event="gave_way"}`, `stackstream_rollup_stack_cache_events_total{event="reset"}`:
			gave += v
		case "stackstream_rollup_state_bytes":
			stateMiB = v / (1 << 20)
		}
	}
	cache.gaveWay = gave > 0
	return cache, stateMiB
}

// sampleRSS records every process's RSS and the lags every step, with the
// simulated time of the fleet of cfg started at t0, and prints a progress
// line every 5 minutes.
func (b *bench) sampleRSS(ctx context.Context, cfg loadgen.Config, t0 time.Time, step time.Duration, bound int64) []rssSample {
	var out []rssSample
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		now := time.Now()
		s := rssSample{at: now.Sub(t0), sim: cfg.SimTime(t0, now), rss: map[string]float64{}}
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
		// The rollup's stack cache among its bounded caches, and its
		// charged state beside its RSS: its state budget's use, apart
		// from the heap the GC lets grow above it.
		for _, inst := range b.instances("stackstream-rollup") {
			if _, ok := s.rss[inst]; ok {
				cache, state := b.rollupState(inst)
				s.caches[inst][stackCacheName] = cache
				s.rss[inst+stateSuffix] = state
				s.caches[inst+stateSuffix] = s.caches[inst]
				s.rss[inst+windowsSuffix] = state - cache.entries
			}
		}
		s.lag, _ = b.lags(ctx)
		out = append(out, s)
		if len(out)%max(int(5*time.Minute/step), 1) == 0 {
			var parts []string
			for _, name := range []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-rollup" + stateSuffix, "stackstream-rollup" + windowsSuffix, "stackstream-query"} {
				parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(name, "stackstream-"), s.rss[name]))
			}
			fmt.Printf("  soak %v (simulated %s UTC): RSS MiB %s; lag %v (bound %d); indexer caches %s\n", s.at.Round(time.Second), s.sim.UTC().Format("15:04:05"), strings.Join(parts, ", "), s.lag, bound,
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
