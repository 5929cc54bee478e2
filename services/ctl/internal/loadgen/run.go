package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
)

// Summary is what a run produced. CPUNanos is the total the rollups must
// add up to once every record went through the pipeline.
type Summary struct {
	Hosts          int
	Profiles       int64 // CPU profiles (as many memory profiles go with them)
	Records        int64 // profile records acknowledged
	Bytes          int64 // of profile record values
	Debuginfo      int64 // debuginfo records acknowledged
	Samples        int64
	CPUNanos       int64
	DistinctStacks int
	Binaries       int
	Behind         time.Duration // how far the last interval was published after its time
	Elapsed        time.Duration
	From, To       time.Time // simulated time covered
}

// ProgressEvery is how often Run prints a progress line.
const ProgressEvery = 5 * time.Second

// Run publishes the fleet's intervals from simulated time cfg.SimStart(now)
// (now + real duration, back by cfg.Duration) at cfg.Speed simulated
// seconds per second (cfg.SimTime), so that the last interval is stamped at
// the wall clock: a catch-up run (Speed > 1) fills the recent past. Each
// host's first profile naming a new binary is published after the broker
// acknowledged that binary's debuginfo, as the agent does. It prints
// progress and the summary to out, and stops early, with what it produced
// so far, when ctx ends.
func Run(ctx context.Context, cfg Config, c *Corpus, cl *kgo.Client, topics record.Topics, now func() time.Time, out io.Writer) (Summary, error) {
	span := cfg.Span()
	wall0 := now()
	simStart := cfg.SimStart(wall0)
	f, err := NewFleet(cfg, c, simStart)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{Hosts: cfg.Hosts, From: simStart, To: simStart.Add(cfg.Duration)}
	r := &runner{cfg: cfg, f: f, cl: cl, topics: topics, published: map[string]*publishOnce{}}
	fmt.Fprintf(out, "loadgen: %d hosts x %d cores at %d Hz, %v intervals (%d raw samples each), %d services per host (%d in the fleet), %v simulated in %v (speed %g), topic %s\n",
		cfg.Hosts, cfg.Cores, cfg.Rate, cfg.Interval, cfg.SamplesPerProfile(), cfg.Services, cfg.CatalogueServices(), cfg.Duration, span.Round(time.Second), cfg.Speed, topics.ProfilesRaw)

	// Hosts are split over workers by index, so one worker generates a
	// host's intervals in order and the client keeps their order.
	workers := min(runtime.GOMAXPROCS(0), cfg.Hosts)
	jobs := make([]chan job, workers)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for w := range jobs {
		jobs[w] = make(chan job, 64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs[w] {
				if err := r.publish(ctx, j); err != nil {
					cancel(err)
				}
			}
		}()
	}
	hosts := make([]*Host, cfg.Hosts)
	for i := range hosts {
		hosts[i] = f.Host(i)
	}
	order := byPhase(hosts)
	intervals := int64(cfg.Duration / cfg.Interval)
	progress := time.NewTicker(ProgressEvery)
	defer progress.Stop()
	var last progressMark
	lastWall := wall0
	// The schedule is the sequence (interval i, hosts by phase): host h's
	// interval i is due at simStart + phase + i x interval, simulated.
	k := int64(0)
	total := intervals * int64(len(order))
loop:
	for k < total {
		i, h := k/int64(len(order))+1, order[k%int64(len(order))]
		due := simStart.Add(hosts[h].Phase + time.Duration(i)*cfg.Interval)
		simNow := cfg.SimTime(wall0, now())
		if due.After(simNow) {
			wait := time.Duration(float64(due.Sub(simNow)) / cfg.Speed)
			select {
			case <-ctx.Done():
				break loop
			case <-progress.C:
				last = r.progress(out, wall0, now(), lastWall, last, simNow.Sub(due))
				lastWall = now()
			case <-time.After(min(wait, 100*time.Millisecond)):
			}
			continue
		}
		select {
		case jobs[h%workers] <- job{host: hosts[h], at: due}:
			k++
			r.behind.Store(int64(simNow.Sub(due)))
		case <-progress.C:
			last = r.progress(out, wall0, now(), lastWall, last, simNow.Sub(due))
			lastWall = now()
		case <-ctx.Done():
			break loop
		}
	}
	for _, ch := range jobs {
		close(ch)
	}
	wg.Wait()
	if err := cl.Flush(context.WithoutCancel(ctx)); err != nil && context.Cause(ctx) == nil {
		cancel(fmt.Errorf("flush: %w", err))
	}
	sum.Profiles, sum.Records, sum.Bytes = r.profiles.Load(), r.records.Load(), r.bytes.Load()
	sum.Debuginfo, sum.Samples, sum.CPUNanos = r.debuginfo.Load(), r.samples.Load(), r.cpuNanos.Load()
	sum.DistinctStacks, sum.Binaries = f.DistinctStacks(), f.Binaries()
	sum.Behind, sum.Elapsed = time.Duration(r.behind.Load()), now().Sub(wall0)
	fmt.Fprintf(out, "loadgen: done in %v: %d hosts, %d cpu + %d memory profiles (%d records acknowledged, %.1f MB), %d debuginfo records, %d binaries, %d distinct stacks, %d raw samples, cpu_nanoseconds_total=%d, last interval published %v after its time\n",
		sum.Elapsed.Round(time.Millisecond), sum.Hosts, sum.Profiles, sum.Profiles, sum.Records, float64(sum.Bytes)/1e6, sum.Debuginfo, sum.Binaries, sum.DistinctStacks, sum.Samples, sum.CPUNanos, sum.Behind.Round(time.Millisecond))
	err = context.Cause(ctx)
	if errors.Is(err, context.Canceled) && r.failed.Load() == nil {
		err = ctx.Err() // stopped by the caller (a signal)
	}
	if p := r.failed.Load(); p != nil {
		err = *p
	}
	return sum, err
}

type job struct {
	host *Host
	at   time.Time
}

type publishOnce struct {
	once sync.Once
	err  error
}

type runner struct {
	cfg    Config
	f      *Fleet
	cl     *kgo.Client
	topics record.Topics

	mu        sync.Mutex
	published map[string]*publishOnce

	profiles, records, bytes, debuginfo, samples, cpuNanos, behind atomic.Int64
	failed                                                         atomic.Pointer[error]
}

// publish generates one interval of one host and hands its records to the
// client; the binaries it names are published (and acknowledged) first.
func (r *runner) publish(ctx context.Context, j job) error {
	b, err := j.host.Next(j.at)
	if err != nil {
		return err
	}
	for _, bin := range b.Binaries {
		if err := r.publishBinary(ctx, bin); err != nil {
			return err
		}
	}
	for _, rec := range b.Records(r.topics, r.cfg.AgentVersion) {
		size := int64(len(rec.Value))
		r.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				if ctx.Err() == nil {
					err = fmt.Errorf("produce to %s: %w", r.topics.ProfilesRaw, err)
					r.failed.CompareAndSwap(nil, &err)
				}
				return
			}
			r.records.Add(1)
			r.bytes.Add(size)
		})
	}
	r.profiles.Add(1)
	r.samples.Add(b.Samples)
	r.cpuNanos.Add(b.CPUNanos)
	if p := r.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *runner) publishBinary(ctx context.Context, bin *Binary) error {
	r.mu.Lock()
	p := r.published[bin.BuildID]
	if p == nil {
		p = &publishOnce{}
		r.published[bin.BuildID] = p
	}
	r.mu.Unlock()
	p.once.Do(func() {
		rec := &kgo.Record{Topic: r.topics.Debuginfo, Key: []byte(bin.BuildID), Value: bin.Debuginfo()}
		if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			p.err = fmt.Errorf("produce debuginfo of %s to %s: %w", bin.BuildID, r.topics.Debuginfo, err)
			return
		}
		r.debuginfo.Add(1)
	})
	return p.err
}

type progressMark struct{ records, bytes int64 }

func (r *runner) progress(out io.Writer, wall0, now, lastWall time.Time, last progressMark, behind time.Duration) progressMark {
	cur := progressMark{r.records.Load(), r.bytes.Load()}
	secs := now.Sub(lastWall).Seconds()
	if behind < 0 {
		behind = 0
	}
	fmt.Fprintf(out, "loadgen: %6.0fs  %d hosts  %d profiles  %.0f records/s  %.2f MB/s  %d debuginfo  %d distinct stacks  behind %v\n",
		now.Sub(wall0).Seconds(), r.cfg.Hosts, r.profiles.Load(), float64(cur.records-last.records)/secs, float64(cur.bytes-last.bytes)/secs/1e6,
		r.debuginfo.Load(), r.f.DistinctStacks(), behind.Round(100*time.Millisecond))
	return cur
}

// byPhase lists host indices by their flush phase.
func byPhase(hosts []*Host) []int {
	order := make([]int, len(hosts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return hosts[order[a]].Phase < hosts[order[b]].Phase })
	return order
}
