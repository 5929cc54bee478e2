package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stackstream/stackstream/services/ctl/internal/loadgen"
)

// scaling is part E: the same fleet through n instances of every consumer,
// for each n of -scale in its order (instances are started or stopped
// between rounds). In each round one instance of each consumer is killed
// with SIGKILL halfway through and started again (unless -scale-kill is
// false); the round's rollup and samples totals must still equal what was
// produced, and the CPU per profile (over all instances, the killed ones'
// included) should stay what one instance spends.
//
// What an instance spends whether or not profiles come (its idle CPU) is
// measured before the round's fleet starts, every group joined and drained,
// over -scale-idle; the round's CPU less n times that rate over the round's
// span is the CPU the profiles cost. The records each consumer read (a
// restart or a rebalance re-reads the records after the last commit) and the
// writes it made (bulk requests, transactions) say where the rest goes.
//
// Each row names the UTC times the round's profiles are stamped in and the
// hours they cross (hours.go): a round across an hour writes the ended
// hour's documents as well as the new hour's. With -scale-align a round
// first waits (at most its simulated duration and a minute) until its
// profiles fit in one hour.
func (b *bench) scaling(ctx context.Context) error {
	o := b.o
	kill := "halfway through, one instance of each consumer is killed (SIGKILL) and restarted 5 s later"
	if !o.scaleKill {
		kill = "no instance killed"
	}
	fmt.Printf("\n## E. Horizontal scaling: %d hosts x %v simulated at speed %g per round through n instances of each consumer (%d partitions); %s; CPU measured from every group joined and drained until drained + 70 s; idle CPU over %v before each round\n",
		o.scaleHosts, o.scaleDuration, o.scaleSpeed, b.parts, kill, o.scaleIdle)
	fmt.Println("| instances | consumer | host intervals | CPU s | ms / interval | idle ms/s per instance | ms / interval less idle | records read / produced | ms less idle per 2 records read | writes (bulk requests, transactions) | documents written | profiles stamped | load |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var failed, exact, steadyRows, crossed []string
	for round, n := range o.scale {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.setInstances(n); err != nil {
			return err
		}
		if err := b.waitReady(ctx); err != nil {
			return err
		}
		members, err := b.waitMembers(ctx, n, 90*time.Second)
		if err != nil {
			return err
		}
		// A rebalance makes the new owners re-read from the last commits,
		// and the rollup writes the windows it rebuilt once their partition
		// had no record for its idle flush (1 min): let both end before the
		// idle interval, or it counts them as idle CPU.
		if err := b.waitDrained(ctx, o.drain); err != nil {
			return err
		}
		sleep(ctx, 70*time.Second)
		b.waitRollupWrites(ctx, o.drain)
		if o.scaleAlign {
			// loadgen starts after the idle interval.
			from := loadgen.Config{Duration: o.scaleDuration, Speed: o.scaleSpeed}.SimStart(time.Now().Add(o.scaleIdle))
			if wait := alignWait(from, o.scaleDuration, alignMargin); wait > 0 {
				fmt.Printf("  waiting %v (-scale-align): the round's profiles would be stamped %s\n", wait.Round(time.Second), hoursNote(from, from.Add(o.scaleDuration)))
				if !sleep(ctx, wait) {
					return ctx.Err()
				}
			}
		}
		idle0, idleAt := b.serviceCPU(b.pids()), time.Now()
		sleep(ctx, o.scaleIdle)
		idle1, idleSpan := b.serviceCPU(b.pids()), time.Since(idleAt)
		idle := map[string]float64{} // CPU s per s of each consumer's n instances together
		for _, svc := range consumers {
			idle[svc] = (idle1[svc] - idle0[svc]) / idleSpan.Seconds()
		}

		cfg := loadgen.DefaultConfig()
		cfg.Hosts, cfg.Duration, cfg.Speed = o.scaleHosts, o.scaleDuration, o.scaleSpeed
		cfg.HostPrefix = fmt.Sprintf("%s-e%d-", b.id, round)
		cfg.Seed = int64(200 + round)
		produced0 := b.produced.Load()
		dlq0 := b.dlqCount()
		before, count0, t0 := b.serviceCPU(b.pids()), b.counters(), time.Now()

		// Kill one instance of each consumer halfway through the fleet's
		// wall time, and start it again 5 s later.
		half := time.Duration(float64(o.scaleDuration) / o.scaleSpeed / 2)
		steady := b.steadyWindow(ctx, half/2, half-5*time.Second)
		restarted := make(chan error, 1)
		go func() {
			if !o.scaleKill {
				restarted <- nil
				return
			}
			if !sleep(ctx, half) {
				restarted <- ctx.Err()
				return
			}
			var victims []string
			for _, svc := range consumers {
				insts := b.instances(svc)
				v := insts[len(insts)-1]
				b.kill(v)
				victims = append(victims, v)
			}
			fmt.Printf("  killed %v at %v; restarting in 5 s\n", victims, half.Round(time.Second))
			sleep(ctx, 5*time.Second)
			for _, v := range victims {
				if err := b.start(v); err != nil {
					restarted <- err
					return
				}
			}
			restarted <- b.waitReady(ctx)
		}()
		sum, err := b.loadgen(ctx, cfg)
		if rerr := <-restarted; err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		if err := b.waitDrained(ctx, o.drain); err != nil {
			return err
		}
		sleep(ctx, 70*time.Second) // the rollup's idle flush, as in part A
		b.waitRollupWrites(ctx, o.drain)
		after, count1, span := b.serviceCPU(b.pids()), b.counters(), time.Since(t0)
		want := b.produced.Load() - produced0
		rollup, err := b.eventually(ctx, want, 3*time.Minute, func() (int64, error) { return b.rollupCPU(ctx, cfg.HostPrefix, time.Time{}) })
		if err != nil {
			return err
		}
		samples, err := b.eventually(ctx, want, 3*time.Minute, func() (int64, error) { return b.samplesCPU(ctx, cfg.HostPrefix, time.Time{}) })
		if err != nil {
			return err
		}
		intervals := float64(sum.Profiles)
		stamped := hoursNote(sum.From, sum.To)
		if crossesHour(sum.From, sum.To) {
			crossed = append(crossed, fmt.Sprintf("round %d (%d instances)", round+1, n))
		}
		for _, svc := range consumers {
			cpu := after[svc] - before[svc]
			busy := cpu - idle[svc]*span.Seconds()
			d := func(what string) float64 { return count1[svc+"/"+what] - count0[svc+"/"+what] }
			// A host interval is two records (CPU and memory); a restart or
			// a rebalance makes a consumer read some twice.
			fmt.Printf("| %d | %s | %d | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f | %s | %s |\n",
				n, strings.TrimPrefix(svc, "stackstream-"), sum.Profiles, cpu, cpu/intervals*1000, idle[svc]/float64(n)*1000, busy/intervals*1000,
				d("records")/float64(sum.Records), busy/max(d("records")/2, 1)*1000, d("writes"), d("documents"), stamped, loadAverage())
		}
		w := <-steady
		w.idle = idle
		steadyRows = append(steadyRows, w.rows(n)...)
		exact = append(exact, fmt.Sprintf("%d instances (members %v, span %v): DLQ %d, rollup CPU == produced %v (%d vs %d), samples CPU == produced %v (%d vs %d), indexer stacks documents %.0f",
			n, members, span.Round(time.Second), b.dlqCount()-dlq0, rollup == want, rollup, want, samples == want, samples, want, count1["stackstream-indexer/stacks"]-count0["stackstream-indexer/stacks"]))
		if rollup != want || samples != want {
			failed = append(failed, fmt.Sprintf("%d instances", n))
		}
	}
	for _, l := range exact {
		fmt.Println("  " + l)
	}
	if len(crossed) > 0 {
		fmt.Printf("  %s: profiles across an hour; the ended hour's documents are in the round as well as the new hour's, so its CPU and documents written are not comparable with a round within one hour (-scale-align avoids it)\n", strings.Join(crossed, ", "))
	}
	fmt.Println("\nThe same rounds from a quarter to just before half of the fleet's wall time (before the kill and the end's flush of the open hour; instances started for the round still build their caches):")
	fmt.Println("| instances | consumer | span | records read | CPU s | ms per 2 records read | less idle | load |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, l := range steadyRows {
		fmt.Println(l)
	}
	if len(failed) > 0 {
		return fmt.Errorf("horizontal scaling: totals not exact with %v", failed)
	}
	return nil
}

// window is what each consumer spent and read between two moments of a
// round.
type window struct {
	span             time.Duration
	cpu0, cpu1, idle map[string]float64
	count0, count1   map[string]float64
	load             string
}

// steadyWindow measures every consumer's CPU and records read from from to
// to after now, in the background; the result comes once to has passed (or
// ctx ended: then it has no rows).
func (b *bench) steadyWindow(ctx context.Context, from, to time.Duration) <-chan window {
	out := make(chan window, 1)
	start := time.Now()
	go func() {
		var w window
		defer func() { out <- w }()
		if !sleep(ctx, from) {
			return
		}
		cpu0, count0, t0 := b.serviceCPU(b.pids()), b.counters(), time.Now()
		if !sleep(ctx, to-time.Since(start)) {
			return
		}
		w = window{span: time.Since(t0), cpu0: cpu0, cpu1: b.serviceCPU(b.pids()), count0: count0, count1: b.counters(), load: loadAverage()}
	}()
	return out
}

// rows are the window's table rows for n instances.
func (w window) rows(n int) []string {
	if w.cpu1 == nil {
		return nil
	}
	var out []string
	for _, svc := range consumers {
		cpu := w.cpu1[svc] - w.cpu0[svc]
		read := w.count1[svc+"/records"] - w.count0[svc+"/records"]
		out = append(out, fmt.Sprintf("| %d | %s | %v | %.0f | %.1f | %.2f | %.2f | %s |",
			n, strings.TrimPrefix(svc, "stackstream-"), w.span.Round(time.Second), read, cpu,
			cpu/max(read/2, 1)*1000, (cpu-w.idle[svc]*w.span.Seconds())/max(read/2, 1)*1000, w.load))
	}
	return out
}

// waitRollupWrites waits, up to limit, until no rollup instance is storing
// an ended hour (stackstream_rollup_hour_writes_in_flight 0 on each) and
// the rollups' bulk requests have not moved for 20 s. A round whose fleet
// crosses an hour, or a rebalance that makes an instance rebuild an ended
// hour from its partitions' commits, stores that hour in the background for
// minutes (202 s at 2 instances on 2026-12-02, beside other work), and the
// windows a rebalance rebuilt are written at the idle flush, which took
// longer than 70 s at load 30: the idle interval counted both as idle
// (20.2 and 8.4 ms/s per rollup instance, CPU less idle below zero at 2
// instances), and a round's CPU read before they ended left the rest to the
// next round.
func (b *bench) waitRollupWrites(ctx context.Context, limit time.Duration) {
	const quiet = 20 * time.Second
	start := time.Now()
	lastWrites, lastChange := -1.0, time.Now()
	for {
		busy := 0
		for _, inst := range b.instances("stackstream-rollup") {
			n, err := metricSum("http://"+b.addrOf(inst)+"/metrics", "stackstream_rollup_hour_writes_in_flight")
			if err != nil || n > 0 {
				busy++
			}
		}
		if w := b.counters()["stackstream-rollup/writes"]; w != lastWrites {
			lastWrites, lastChange = w, time.Now()
		}
		waited := time.Since(start).Round(time.Second)
		if busy == 0 && time.Since(lastChange) >= quiet {
			if waited > quiet+5*time.Second {
				fmt.Printf("  waited %v for the rollup's writes to end\n", waited)
			}
			return
		}
		if waited >= limit {
			fmt.Printf("  the rollup still writing after %v (%d instances storing an ended hour); measuring anyway\n", waited, busy)
			return
		}
		if !sleep(ctx, 5*time.Second) {
			return
		}
	}
}

// setInstances starts or stops instances until every consumer has n.
func (b *bench) setInstances(n int) error {
	for _, svc := range consumers {
		for i := len(b.instances(svc)); i < n; i++ {
			if err := b.start(instanceName(svc, i)); err != nil {
				return err
			}
		}
		for insts := b.instances(svc); len(insts) > n; insts = insts[:len(insts)-1] {
			b.stop(insts[len(insts)-1])
		}
	}
	return nil
}

// eventually polls a total every 5 s until it equals want, and returns the
// last value. It gives up once the total has not moved for limit (what is
// missing then is lost, not late), or after 5 x limit in all; while it
// waits it prints the share of want landed every 30 s, so a total still
// landing behind a long write is told from one that stopped short.
func (b *bench) eventually(ctx context.Context, want int64, limit time.Duration, total func() (int64, error)) (int64, error) {
	start := time.Now()
	moved, printed := start, start
	var last int64
	for {
		got, err := total()
		if err != nil || got == want || ctx.Err() != nil {
			return got, err
		}
		now := time.Now()
		if got != last {
			last, moved = got, now
		}
		if now.Sub(moved) > limit || now.Sub(start) > 5*limit {
			return got, nil
		}
		if now.Sub(printed) >= 30*time.Second {
			printed = now
			fmt.Printf("  waiting for the totals: %d of %d (%.2f%%) after %v, last change %v ago\n",
				got, want, 100*float64(got)/float64(max(want, 1)), now.Sub(start).Round(time.Second), now.Sub(moved).Round(time.Second))
		}
		sleep(ctx, 5*time.Second)
	}
}

// waitMembers waits until every consumer group has n members and returns
// their counts (symbolizer, indexer, rollup).
func (b *bench) waitMembers(ctx context.Context, n int, limit time.Duration) ([3]int, error) {
	deadline := time.Now().Add(limit)
	for {
		var got [3]int
		ok := true
		for i, svc := range consumers {
			gs, err := b.adm.DescribeGroups(ctx, b.groups[svc])
			if err != nil {
				return got, err
			}
			got[i] = len(gs[b.groups[svc]].Members)
			ok = ok && got[i] == n
		}
		if ok {
			return got, nil
		}
		if time.Now().After(deadline) || !sleep(ctx, time.Second) {
			return got, fmt.Errorf("consumer groups have %v members, want %d each, after %v", got, n, limit)
		}
	}
}
