// Command bench runs stackctl loadgen's fleet through the whole local
// pipeline (Kafka, OpenSearch, stackstream-symbolizer, -indexer, -rollup,
// -query from bin/) under throw-away topic, index and group names, and
// prints (issue 15):
//
//	A  CPU per profile of each consumer (and of Kafka and OpenSearch), and
//	   the simulated hosts one consumer core sustains;
//	B  a stepped search for the largest fleet the machine sustains with lag
//	   bounded;
//	C  end-to-end latency, agent flush -> visible in the query API, from a
//	   probe host publishing marked profiles during every step;
//	D  rollup CPU total == produced CPU total once everything is stored;
//	F  a soak (-soak), before E (or first, at -soak-speed above 1): RSS of
//	   every process and lag over time, RSS hour over hour, totals exact;
//	E  horizontal scaling: 1, 2, 3 instances of every consumer, one of each
//	   killed and restarted mid-round, totals exact, CPU per profile.
//
// bench/run.sh runs it for make bench; go run ./bench -h lists the flags.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ctl/internal/loadgen"
)

type options struct {
	bin, repo        string
	brokers, osURL   string
	calHosts         int
	calDuration      time.Duration
	calSpeed         float64
	steps            []int
	step, drain      time.Duration
	probeEvery       time.Duration
	keep             bool
	refresh          string
	portBase         int
	rollupStateBytes int64
	scale            []int
	scaleHosts       int
	scaleDuration    time.Duration
	scaleSpeed       float64
	scaleIdle        time.Duration
	scaleKill        bool
	scaleAlign       bool
	soak             time.Duration
	soakSpeed        float64
	soakHosts        int
}

func main() {
	var o options
	var steps string
	flag.StringVar(&o.repo, "repo", "../..", "repository root (bin/ and .run/ below it)")
	flag.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka")
	flag.StringVar(&o.osURL, "opensearch", "http://127.0.0.1:9200", "OpenSearch")
	flag.IntVar(&o.calHosts, "cal-hosts", 200, "A: hosts of the calibration fleet; 0 skips part A")
	flag.DurationVar(&o.calDuration, "cal-duration", 3*time.Minute, "A: simulated time of the calibration fleet")
	flag.Float64Var(&o.calSpeed, "cal-speed", 6, "A: catch-up speed of the calibration fleet")
	flag.StringVar(&steps, "steps", "100,200,400,800", "B: fleet sizes tried, in order; the search stops at the first that fails")
	flag.DurationVar(&o.step, "step", time.Minute, "B: length of each step (real time, speed 1)")
	flag.DurationVar(&o.drain, "drain", 2*time.Minute, "longest wait for the consumers to catch up between steps")
	flag.DurationVar(&o.probeEvery, "probe-every", 2*time.Second, "C: one probe profile this often during each step")
	flag.IntVar(&o.portBase, "port-base", 18912, "listen ports of the services started: symbolizer, indexer, rollup, query from this one up, +100 per further instance")
	flag.StringVar(&o.refresh, "refresh", "5s", "STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL of the bench's indices")
	flag.BoolVar(&o.keep, "keep", false, "keep the topics, indices and templates")
	flag.Int64Var(&o.rollupStateBytes, "rollup-state-bytes", 0, "STACKSTREAM_ROLLUP_MAX_STATE_BYTES of the rollup; 0 keeps its default")
	var scale string
	flag.StringVar(&scale, "scale", "1,2,3", "E: instances of every consumer in each horizontal-scaling round, in this order (3,2,1 stops instances between rounds); empty skips part E")
	flag.IntVar(&o.scaleHosts, "scale-hosts", 150, "E: hosts of each round's fleet")
	flag.DurationVar(&o.scaleDuration, "scale-duration", 3*time.Minute, "E: simulated time of each round's fleet")
	flag.Float64Var(&o.scaleSpeed, "scale-speed", 4, "E: catch-up speed of each round's fleet")
	flag.DurationVar(&o.scaleIdle, "scale-idle", 30*time.Second, "E: how long each round measures its instances' idle CPU before its fleet starts")
	flag.BoolVar(&o.scaleKill, "scale-kill", true, "E: kill one instance of each consumer halfway through each round and restart it")
	flag.BoolVar(&o.scaleAlign, "scale-align", false, "E: before a round whose profiles would cross a UTC hour, wait (at most -scale-duration + 1m) until they fit in one hour; -scale-duration at most 59m")
	flag.DurationVar(&o.soak, "soak", 0, "F: length of the soak in simulated time (real time at -soak-speed 1; the issue's is 30m); 0 skips part F")
	flag.Float64Var(&o.soakSpeed, "soak-speed", 1, "F: speed of the soak, at least 1: -soak of simulated time ending at the wall clock, published in -soak / speed of real time (3h at 6 take 30m); above 1 part F runs first, before A, and needs -soak-hosts")
	flag.IntVar(&o.soakHosts, "soak-hosts", 0, "F: hosts of the soak; 0 takes the largest fleet part B found bounded")
	flag.Parse()
	var err error
	if o.scale, err = hostCounts(scale, 8); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -scale:", err)
		os.Exit(2)
	}
	if o.steps, err = hostCounts(steps, loadgen.MaxHosts); err != nil || len(o.steps) == 0 {
		fmt.Fprintln(os.Stderr, "bench: -steps: at least one host count:", err)
		os.Exit(2)
	}
	if o.scaleAlign && o.scaleDuration+alignMargin > time.Hour {
		fmt.Fprintf(os.Stderr, "bench: -scale-align with -scale-duration=%v: a round's profiles fit in one hour, with %v to spare, only up to %v: shorten -scale-duration or drop -scale-align\n", o.scaleDuration, alignMargin, time.Hour-alignMargin)
		os.Exit(2)
	}
	if !(o.soakSpeed >= 1 && o.soakSpeed <= loadgen.MaxSpeed) {
		fmt.Fprintf(os.Stderr, "bench: -soak-speed=%g: want 1..%d simulated seconds per second (1 is real time)\n", o.soakSpeed, loadgen.MaxSpeed)
		os.Exit(2)
	}
	if o.soak > 0 && o.soakSpeed > 1 && o.soakHosts == 0 {
		fmt.Fprintf(os.Stderr, "bench: -soak-speed=%g needs -soak-hosts: a catch-up soak runs before part B, so no fleet size is found yet\n", o.soakSpeed)
		os.Exit(2)
	}
	o.bin = filepath.Join(o.repo, "bin")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A service that exits on its own (a port in use, a crash) makes every
	// figure after it wrong: it ends the run with its error.
	ctx, fail := context.WithCancelCause(ctx)
	err = run(ctx, fail, o)
	if c := context.Cause(ctx); err != nil && c != nil && !errors.Is(c, context.Canceled) {
		err = c
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// hostCounts parses a comma-separated list of counts in 1..limit; an
// empty list is nil.
func hostCounts(list string, limit int) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > limit {
			return nil, fmt.Errorf("%q is not a count in 1..%d", s, limit)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench holds the run's names and handles.
type bench struct {
	o       options
	id      string // unique part of every name
	env     []string
	topics  record.Topics
	cl      *kgo.Client
	adm     *kadm.Client
	corpus  *loadgen.Corpus
	mu      sync.Mutex
	procs   map[string]*exec.Cmd // by instance name (instanceName)
	fail    context.CancelCauseFunc
	deadCPU map[string]float64 // CPU seconds of killed instances, by service
	// deadCounters are the last counters (counterSeries) of killed
	// instances.
	deadCounters map[string]float64
	groups       map[string]string // service -> consumer group
	produced     atomic.Int64      // CPU nanoseconds acknowledged by the broker
	logDir       string
	parts        int64 // partitions of profiles.symbolized
	best         int   // largest fleet part B found bounded
}

// services started here, in the order of their listen ports: -port-base
// and up (not the defaults, so a running local pipeline is not in the way).
var services = []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup", "stackstream-query"}

var consumers = []string{"stackstream-symbolizer", "stackstream-indexer", "stackstream-rollup"}

func run(ctx context.Context, fail context.CancelCauseFunc, o options) error {
	b := &bench{o: o, fail: fail, id: fmt.Sprintf("b15-%d", time.Now().Unix()), procs: map[string]*exec.Cmd{}, deadCPU: map[string]float64{}, deadCounters: map[string]float64{}, groups: map[string]string{}}
	b.topics = record.TopicsFor(b.id + ".")
	b.logDir = filepath.Join(os.TempDir(), b.id)
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return err
	}
	b.env = append(os.Environ(),
		"STACKSTREAM_KAFKA_BROKERS="+o.brokers,
		"STACKSTREAM_KAFKA_TOPIC_PREFIX="+b.id+".",
		"STACKSTREAM_OPENSEARCH_URL="+o.osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX="+b.id+"-",
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL="+o.refresh,
		"STACKSTREAM_SYMBOLIZER_GROUP="+b.id+"-symbolizer",
		"STACKSTREAM_INDEXER_GROUP="+b.id+"-indexer",
		"STACKSTREAM_ROLLUP_GROUP="+b.id+"-rollup",
	)
	if o.rollupStateBytes > 0 {
		b.env = append(b.env, fmt.Sprintf("STACKSTREAM_ROLLUP_MAX_STATE_BYTES=%d", o.rollupStateBytes))
	}
	b.groups = map[string]string{
		"stackstream-symbolizer": b.id + "-symbolizer",
		"stackstream-indexer":    b.id + "-indexer",
		"stackstream-rollup":     b.id + "-rollup",
	}
	var err error
	if b.corpus, err = loadgen.LoadCorpus(); err != nil {
		return err
	}
	if b.cl, err = kafka.NewClient(ctx, kafka.Config{Brokers: []string{o.brokers}, DialTimeout: 10 * time.Second},
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == b.topics.Debuginfo {
				return kafka.DebuginfoMaxMessageBytes
			}
			return 1_000_012
		})); err != nil {
		return err
	}
	defer b.cl.Close()
	b.adm = kadm.NewClient(b.cl)
	defer b.cleanup()

	fmt.Printf("# issue 15 pipeline bench %s: %d CPUs, %s; topics %s*, indices %s-*, refresh %s; logs %s\n",
		b.id, runtime.NumCPU(), cpuModel(), b.id+".", b.id, o.refresh, b.logDir)
	if out, err := b.command("stackctl", "init"); err != nil {
		return fmt.Errorf("stackctl init: %v: %s", err, out)
	}
	for _, name := range append(consumers, "stackstream-query") {
		if err := b.start(name); err != nil {
			return err
		}
	}
	if err := b.waitReady(ctx); err != nil {
		return err
	}
	td, err := b.adm.ListTopics(ctx, b.topics.ProfilesSymbolized)
	if err != nil {
		return err
	}
	b.parts = int64(len(td[b.topics.ProfilesSymbolized].Partitions))
	// A catch-up soak stamps its profiles from -soak back, but the rollup
	// dead-letters a profile older than its partition's newest by more than
	// its allowed lateness and retention (12 m by default; docs/ROLLUP.md,
	// "Windows, lateness and recomputation"), and every part after it
	// leaves that at the wall clock: it runs first.
	catchUp := o.soak > 0 && o.soakSpeed > 1
	if catchUp {
		if err := b.soak(ctx); err != nil {
			return err
		}
	}
	if o.calHosts > 0 {
		if err := b.calibrate(ctx); err != nil {
			return err
		}
	}
	if err := b.search(ctx); err != nil {
		return err
	}
	if err := b.exactness(ctx); err != nil {
		return err
	}
	// The soak runs before part E so that it has one instance of each
	// consumer, as part B had.
	if o.soak > 0 && !catchUp {
		if err := b.soak(ctx); err != nil {
			return err
		}
	}
	if len(o.scale) > 0 {
		return b.scaling(ctx)
	}
	return nil
}

// calibrate is part A: a fleet published at catch-up speed, drained; CPU
// of every process over the whole span (rollup's idle flush included).
func (b *bench) calibrate(ctx context.Context) error {
	o := b.o
	cfg := loadgen.DefaultConfig()
	cfg.Hosts, cfg.Duration, cfg.Speed = o.calHosts, o.calDuration, o.calSpeed
	cfg.HostPrefix = b.id + "-cal-"
	before := b.serviceCPU(b.pids())
	self0 := selfCPU()
	wall := time.Now()
	sum, err := b.loadgen(ctx, cfg)
	if err != nil {
		return err
	}
	genCPU := selfCPU() - self0
	if err := b.waitDrained(ctx, o.drain); err != nil {
		return err
	}
	// The rollup writes a partition's windows once no record came for its
	// idle flush (1 min): wait for it, so its writes are counted.
	sleep(ctx, 70*time.Second)
	after := b.serviceCPU(b.pids())
	span := time.Since(wall)
	n := float64(sum.Profiles) // host intervals: one CPU and one memory profile each
	fmt.Printf("\n## A. CPU per profile: %d hosts x %v simulated at speed %g (%d host intervals of 1 CPU + 1 memory profile, %d raw samples each, %d distinct stacks, %d binaries), measured over %v until drained + 70 s\n",
		cfg.Hosts, cfg.Duration, cfg.Speed, sum.Profiles, cfg.SamplesPerProfile(), sum.DistinctStacks, sum.Binaries, span.Round(time.Second))
	fmt.Printf("| process | CPU s | CPU ms per host interval | 8-core hosts at 19 Hz / 10 s per core |\n|---|---|---|---|\n")
	for _, name := range append(append([]string{}, consumers...), "kafka", "opensearch") {
		d := after[name] - before[name]
		if _, ok := before[name]; !ok {
			continue
		}
		per := d / n
		fmt.Printf("| %s | %.1f | %.2f | %.0f |\n", name, d, per*1000, cfg.Interval.Seconds()/per)
	}
	fmt.Printf("| loadgen (this process, generating) | %.1f | %.2f | %.0f |\n", genCPU, genCPU/n*1000, cfg.Interval.Seconds()/(genCPU/n))
	fmt.Println("(kafka and opensearch are shared with the other users of this machine: upper bounds)")
	fmt.Printf("Profiles stamped %s", hoursNote(sum.From, sum.To))
	if crossesHour(sum.From, sum.To) {
		fmt.Print(": the ended hour's documents are in this run as well as the new hour's, so the rollup's CPU is not comparable with a run within one hour")
	}
	fmt.Println()
	b.diskUsage(n)
	return nil
}

// search is parts B and C: steps of growing fleets at real time, with the
// probe publishing marked profiles, until a step's lag is not bounded.
func (b *bench) search(ctx context.Context) error {
	o := b.o
	fmt.Printf("\n## B+C. Stepped search: each step %v at speed 1 (8 cores, 19 Hz, 10 s, 5 services/host; one fleet growing: a step's hosts include the previous step's), lag sampled every 5 s; bounded = every group's lag in the second half of the step at most one interval of the fleet's records, no record to any DLQ during the step, and loadgen on time; probe every %v, refresh %s\n", o.step, o.probeEvery, o.refresh)
	fmt.Println("| hosts | records/s | symbolizer lag max (end) | indexer lag max (end) | rollup lag max (end) | DLQ records | loadgen behind | bounded | probes | latency p50 | p99 | max | consumer CPU % (sym/idx/rollup/kafka/os) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	best := 0
	for si, hosts := range o.steps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg := loadgen.DefaultConfig()
		cfg.Hosts, cfg.Duration, cfg.Speed = hosts, o.step, 1
		// One growing fleet: step N's first hosts are the previous step's
		// (same names, same seed, so the same stacks), as a fleet that
		// grows; distinct hosts per step would make an hour hold the sum
		// of every step's fleet, not the fleet of the step.
		cfg.HostPrefix = b.id + "-s-"
		cfg.Seed = 100
		before := b.serviceCPU(b.pids())
		dlq0 := b.dlqCount()
		t0 := time.Now()
		stepCtx, stepDone := context.WithCancel(ctx)
		var lags []lagSample
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); lags = b.sampleLag(stepCtx, t0) }()
		probes := &probeSet{}
		wg.Add(1)
		go func() { defer wg.Done(); b.probe(stepCtx, fmt.Sprintf("%s-s%d-probe-", b.id, si), probes) }()
		sum, err := b.loadgen(ctx, cfg)
		stepDone()
		wg.Wait()
		if err != nil {
			return err
		}
		elapsed := time.Since(t0)
		after := b.serviceCPU(b.pids())
		dlq := b.dlqCount() - dlq0
		bound := int64(2*hosts) + 50 // one interval of the fleet's records, and the probes'
		var maxLag [3]int64
		for _, l := range lags {
			if l.at < elapsed/2 {
				continue
			}
			for i := range maxLag {
				maxLag[i] = max(maxLag[i], l.lag[i])
			}
		}
		var end [3]int64
		if len(lags) > 0 {
			end = lags[len(lags)-1].lag
		}
		ok := sum.Behind < cfg.Interval && dlq == 0
		for i := range maxLag {
			ok = ok && maxLag[i] <= bound
		}
		lat := probes.wait(60 * time.Second)
		pct := func(name string) string {
			return fmt.Sprintf("%.0f", (after[name]-before[name])/elapsed.Seconds()*100)
		}
		fmt.Printf("| %d | %.0f | %d (%d) | %d (%d) | %d (%d) | %d | %v | %v | %d (%d not seen in 60 s) | %s | %s | %s | %s/%s/%s/%s/%s |\n",
			hosts, float64(sum.Records)/elapsed.Seconds(), maxLag[0], end[0], maxLag[1], end[1], maxLag[2], end[2], dlq,
			sum.Behind.Round(10*time.Millisecond), ok, lat.n, lat.lost, lat.p(50), lat.p(99), lat.p(100),
			pct("stackstream-symbolizer"), pct("stackstream-indexer"), pct("stackstream-rollup"), pct("kafka"), pct("opensearch"))
		if err := b.waitDrained(ctx, o.drain); err != nil {
			fmt.Printf("(after %d hosts: %v)\n", hosts, err)
			break
		}
		if !ok {
			break
		}
		best = hosts
	}
	fmt.Printf("largest fleet with lag bounded: %d hosts (of the steps tried)\n", best)
	b.best = best
	return nil
}

// exactness is part D: the rollups' CPU total over every host of the run
// equals what the broker acknowledged.
func (b *bench) exactness(ctx context.Context) error {
	fmt.Printf("\n## D. Exactness: rollup CPU total vs produced\n")
	if err := b.waitDrained(ctx, b.o.drain); err != nil {
		return err
	}
	want := b.produced.Load()
	got, err := b.eventually(ctx, want, 4*time.Minute, func() (int64, error) { return b.rollupCPU(ctx, b.id+"-", time.Time{}) })
	if err != nil {
		return err
	}
	// What went to the DLQ instead of a rollup or a samples document.
	for _, name := range []string{"stackstream-rollup", "stackstream-indexer", "stackstream-symbolizer"} {
		for _, inst := range b.instances(name) {
			for _, l := range metricLines("http://"+b.addrOf(inst)+"/metrics", "_dlq_total", "records_total{outcome=\"dlq\"}", "panics_total") {
				fmt.Printf("  %s: %s\n", inst, l)
			}
		}
	}
	fmt.Printf("produced cpu_nanoseconds_total=%d, rollup (kind=service, 1m) sum=%d, difference %d: exact=%v\n", want, got, got-want, got == want)
	if got != want {
		return fmt.Errorf("rollup CPU total %d != produced %d", got, want)
	}
	return nil
}

// loadgen runs one fleet on the bench's client and adds its CPU total.
func (b *bench) loadgen(ctx context.Context, cfg loadgen.Config) (loadgen.Summary, error) {
	var out bytes.Buffer
	sum, err := loadgen.Run(ctx, cfg, b.corpus, b.cl, b.topics, time.Now, &out)
	if err != nil {
		return sum, fmt.Errorf("loadgen: %w\n%s", err, out.String())
	}
	if sum.Records != 2*sum.Profiles {
		return sum, fmt.Errorf("loadgen: %d of %d records acknowledged", sum.Records, 2*sum.Profiles)
	}
	b.produced.Add(sum.CPUNanos)
	last := strings.TrimSpace(out.String())
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	fmt.Println("  " + last)
	return sum, nil
}

type lagSample struct {
	at  time.Duration
	lag [3]int64 // symbolizer, indexer (group lag), rollup (its lag metric)
}

func (b *bench) sampleLag(ctx context.Context, t0 time.Time) []lagSample {
	var out []lagSample
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		if l, err := b.lags(ctx); err == nil {
			out = append(out, lagSample{time.Since(t0), l})
		}
	}
}

// lags: committed lag of the symbolizer's and indexer's groups; the
// rollup's own lag metric (its commits trail by design: windows stay open
// for late profiles, docs/ROLLUP.md).
func (b *bench) lags(ctx context.Context) ([3]int64, error) {
	var out [3]int64
	ls, err := b.adm.Lag(ctx, b.groups["stackstream-symbolizer"], b.groups["stackstream-indexer"])
	if err != nil {
		return out, err
	}
	for _, l := range ls.Sorted() {
		i := 0
		if l.Group == b.groups["stackstream-indexer"] {
			i = 1
		}
		for _, parts := range l.Lag {
			for _, p := range parts {
				if p.Lag > 0 {
					out[i] += p.Lag
				}
			}
		}
	}
	for _, inst := range b.instances("stackstream-rollup") {
		n, err := metricSum("http://"+b.addrOf(inst)+"/metrics", "stackstream_rollup_lag_records")
		if err != nil {
			return out, err
		}
		out[2] += n
	}
	return out, nil
}

// waitDrained waits until the symbolizer and indexer groups have no lag and
// the rollup has read everything.
func (b *bench) waitDrained(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last [3]int64
	still := 0
	for {
		l, err := b.lags(ctx)
		// A read-committed consumer of the symbolizer's transactional
		// output stops short of the high watermark on a partition whose
		// last offsets are transaction markers, or records of a
		// transaction a killed symbolizer left to be aborted: up to one
		// offset per partition, more after a kill. So a small lag that
		// stays the same for 10 s also counts; the totals check the rest.
		if err == nil && l == last {
			still++
		} else {
			still = 0
		}
		last = l
		small := l[0] == 0 && l[1] <= 4*b.parts && l[2] <= 4*b.parts
		if err == nil && small && (l[1] <= b.parts && l[2] <= b.parts || still >= 5) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained after %v: lag %v (err %v)", limit, l, err)
		}
		if !sleep(ctx, 2*time.Second) {
			return ctx.Err()
		}
	}
}

// probe publishes a one-sample CPU profile for a new probe host every
// probeEvery and measures when the query API first shows it.
func (b *bench) probe(ctx context.Context, prefix string, ps *probeSet) {
	t := time.NewTicker(b.o.probeEvery)
	defer t.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		host := fmt.Sprintf("%sh%04d", prefix, seq)
		flush := time.Now()
		value, nanos, err := probeProfile(flush)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: probe:", err)
			return
		}
		rec := &kgo.Record{Topic: b.topics.ProfilesRaw, Key: []byte(host), Value: value,
			Headers: record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "bench-probe"}.Headers()}
		if err := b.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			continue
		}
		b.produced.Add(nanos)
		ps.add()
		go func() { ps.done(b.visible(host, flush)) }()
	}
}

// probeProfile is a CPU profile as the agent sends it: one sample whose only
// frame is a kernel-kind frame (named by the agent, passed through by the
// symbolizer), for the interval that ends at flush.
func probeProfile(flush time.Time) ([]byte, int64, error) {
	const period = int64(time.Second) / 19
	m := &profile.Mapping{ID: 1, File: record.MappingKernel, HasFunctions: true}
	fn := &profile.Function{ID: 1, Name: "loadgen_probe", SystemName: "loadgen_probe"}
	loc := &profile.Location{ID: 1, Mapping: m, Address: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            period,
		TimeNanos:         flush.Add(-10 * time.Second).UnixNano(),
		DurationNanos:     int64(10 * time.Second),
		DefaultSampleType: "cpu",
		Mapping:           []*profile.Mapping{m}, Function: []*profile.Function{fn}, Location: []*profile.Location{loc},
		Sample: []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{1, period},
			Label: map[string][]string{record.LabelService: {"probe"}, record.LabelPID: {"1"}}}},
	}
	v, err := record.EncodeProfileLevel(p, gzip.BestSpeed)
	return v, period, err
}

// visible polls the flame graph of the probe host until it has samples;
// it returns the time from flush, or -1 after 60 s.
func (b *bench) visible(host string, flush time.Time) time.Duration {
	q := url.Values{"type": {"cpu"}, "query": {fmt.Sprintf(`{host=%q}`, host)}, "from": {"now-15m"}, "to": {"now"}}
	u := "http://" + b.addrOf(instanceName("stackstream-query", 0)) + "/api/v1/flamegraph?" + q.Encode()
	for time.Since(flush) < 60*time.Second {
		var fg struct {
			Total int64 `json:"total"`
		}
		if err := getJSON(u, &fg); err == nil && fg.Total > 0 {
			return time.Since(flush)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

type probeSet struct {
	mu   sync.Mutex
	wg   sync.WaitGroup
	lat  []time.Duration
	lost int
}

func (p *probeSet) add() { p.wg.Add(1) }
func (p *probeSet) done(d time.Duration) {
	p.mu.Lock()
	if d < 0 {
		p.lost++
	} else {
		p.lat = append(p.lat, d)
	}
	p.mu.Unlock()
	p.wg.Done()
}

type latencies struct {
	n, lost int
	sorted  []time.Duration
}

func (l latencies) p(q int) string {
	if len(l.sorted) == 0 {
		return "-"
	}
	i := (len(l.sorted)*q + 99) / 100
	i = min(max(i-1, 0), len(l.sorted)-1)
	return fmt.Sprintf("%.2f s", l.sorted[i].Seconds())
}

func (p *probeSet) wait(limit time.Duration) latencies {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := append([]time.Duration(nil), p.lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return latencies{n: len(s) + p.lost, lost: p.lost, sorted: s}
}

// dlqCount is the records every consumer sent to the DLQ so far.
func (b *bench) dlqCount() int64 {
	var n int64
	for _, svc := range []string{"symbolizer", "indexer", "rollup"} {
		for _, inst := range b.instances("stackstream-" + svc) {
			v, _ := metricSum("http://"+b.addrOf(inst)+"/metrics", "stackstream_"+svc+"_dlq_total")
			n += v
		}
	}
	return n
}

// rollupCPU sums the per-minute service rollups of the hosts whose names
// start with prefix.
func (b *bench) rollupCPU(ctx context.Context, prefix string, since time.Time) (int64, error) {
	return b.cpuTotal(ctx, "rollups", `{"term":{"kind":"service"}},{"term":{"resolution":"1m"}},`, prefix, since)
}

// samplesCPU sums the samples documents' values of those hosts.
func (b *bench) samplesCPU(ctx context.Context, prefix string, since time.Time) (int64, error) {
	return b.cpuTotal(ctx, "samples", "", prefix, since)
}

// cpuTotal sums the CPU values of an index kind's documents matching
// filters (a JSON list prefix, each element followed by a comma) for the
// hosts starting with prefix: per host (each sum stays exact in a double)
// and then here.
func (b *bench) cpuTotal(ctx context.Context, kind, filters, prefix string, since time.Time) (int64, error) {
	if !since.IsZero() {
		filters += fmt.Sprintf(`{"range":{"@timestamp":{"gte":%q}}},`, since.UTC().Format(time.RFC3339Nano))
	}
	body := fmt.Sprintf(`{"size":0,"query":{"bool":{"filter":[%s{"term":{"type":"cpu"}},{"prefix":{"host":%q}}]}},
"aggs":{"h":{"terms":{"field":"host","size":65000},"aggs":{"v":{"sum":{"field":"value"}}}}}}`, filters, prefix)
	pattern := b.o.osURL + "/" + b.id + "-" + kind + "-*"
	if _, err := http.Post(pattern+"/_refresh", "application/json", nil); err != nil {
		return 0, err
	}
	resp, err := http.Post(pattern+"/_search", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Aggregations struct {
			H struct {
				Buckets []struct {
					V struct {
						Value float64 `json:"value"`
					} `json:"v"`
				} `json:"buckets"`
				Other int64 `json:"sum_other_doc_count"`
			} `json:"h"`
		} `json:"aggregations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("%s total: %w", kind, err)
	}
	if r.Aggregations.H.Other != 0 {
		return 0, fmt.Errorf("%s total: more hosts than one terms aggregation holds", kind)
	}
	var total int64
	for _, bk := range r.Aggregations.H.Buckets {
		total += int64(bk.V.Value)
	}
	return total, nil
}

// diskUsage prints the bytes on disk of the run's indices and topics per
// host interval so far.
func (b *bench) diskUsage(n float64) {
	var idx []struct {
		Index string `json:"index"`
		Size  string `json:"store.size"`
	}
	_, _ = http.Post(b.o.osURL+"/"+b.id+"-*/_flush", "application/json", nil)
	if err := getJSON(b.o.osURL+"/_cat/indices/"+b.id+"-*?format=json&bytes=b", &idx); err == nil {
		var total int64
		for _, i := range idx {
			s, _ := strconv.ParseInt(i.Size, 10, 64)
			total += s
			fmt.Printf("  opensearch %s: %d bytes\n", i.Index, s)
		}
		fmt.Printf("  opensearch, all indices of the run: %.0f bytes per host interval (not force-merged)\n", float64(total)/n)
	}
	var kbytes int64
	dirs, _ := filepath.Glob(filepath.Join(b.o.repo, ".run/kafka/data", b.id+".*"))
	for _, d := range dirs {
		filepath.Walk(d, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && strings.HasSuffix(fi.Name(), ".log") {
				kbytes += fi.Size()
			}
			return nil
		})
	}
	fmt.Printf("  kafka, segment files of the run's topics (raw, symbolized, debuginfo): %.0f bytes per host interval\n", float64(kbytes)/n)
}

func (b *bench) command(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(b.o.bin, name), args...)
	cmd.Env = b.env
	return cmd.CombinedOutput()
}

func (b *bench) cleanup() {
	b.stopAll()
	if b.o.keep {
		return
	}
	ctx := context.Background()
	b.adm.DeleteTopics(ctx, b.topics.All()...)
	b.adm.DeleteGroups(ctx, b.groups["stackstream-symbolizer"], b.groups["stackstream-indexer"], b.groups["stackstream-rollup"])
	for _, path := range []string{"/" + b.id + "-*", "/_index_template/" + b.id + "-*"} {
		req, _ := http.NewRequest(http.MethodDelete, b.o.osURL+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// cpuOf reads user+system CPU seconds of each process from /proc.
func cpuOf(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) start at ")".
		f := strings.Fields(string(s[bytes.LastIndexByte(s, ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[name] = (ut + st) / 100 // USER_HZ
	}
	return out
}

func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func metricSum(u, name string) (int64, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return int64(total), sc.Err()
}

// metricLines returns the lines of a metrics page that contain any of subs.
func metricLines(u string, subs ...string) []string {
	resp, err := http.Get(u)
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, sub := range subs {
			if !strings.HasPrefix(line, "#") && strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
		}
	}
	return "unknown CPU"
}
