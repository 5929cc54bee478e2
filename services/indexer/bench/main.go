// Command bench measures the indexer against a bare bulk loop on the same
// node and the bytes on disk per raw sample; bench/run.sh runs it for
// `make bench`. It needs the local Kafka and OpenSearch (make up).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/convert"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

func main() {
	hosts := flag.Int("hosts", 20, "hosts in the corpus")
	profiles := flag.Int("profiles", 30, "10 s profiles per host")
	keep := flag.Bool("keep", false, "keep the indices and topics")
	rounds := flag.Int("rounds", 3, "alternating rounds of bare loop and indexer; medians are reported")
	samples := flag.Int("samples", 300, "pprof samples per profile (distinct stack and process pairs before merging)")
	raw := flag.Int64("raw", 50, "raw samples per pprof sample: uniform in 1..raw")
	zipf := flag.Float64("zipf", 0, "Zipf exponent (> 1) of the stack distribution; 0 is uniform")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	size := flag.Bool("size", true, "measure the bytes on disk after the last round (waits for retention leases and merges, 1-2 min)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	corpus := indexertest.Corpus{
		Seed: 2026, Hosts: *hosts, ProfilesPerHost: *profiles,
		Start:    time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour),
		Interval: 10 * time.Second,
		Stacks:   2000, Depth: 30, Processes: 10, SamplesPerProf: *samples, RawPerSample: *raw, Zipf: *zipf,
	}
	if err := run(corpus, *rounds, *keep, *size); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// tb adapts the test helpers (which take a testing.TB) to a program: any
// failure ends it.
type tb struct {
	testing.TB
	cleanups []func()
}

func (t *tb) Helper()                           {}
func (t *tb) Fatal(args ...any)                 { log.Fatal(args...) }
func (t *tb) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
func (t *tb) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *tb) Logf(format string, args ...any)   { log.Printf(format, args...) }
func (t *tb) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(corpus indexertest.Corpus, rounds int, keep, size bool) error {
	hosts, profiles := corpus.Hosts, corpus.ProfilesPerHost
	ctx := context.Background()
	brokers := strings.Split(env("STACKSTREAM_TEST_KAFKA_BROKERS", "127.0.0.1:9092"), ",")
	url := env("STACKSTREAM_TEST_OPENSEARCH_URL", "http://127.0.0.1:9200")
	t := &tb{}
	if !keep {
		defer t.cleanup()
	}
	stamp := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)

	recs, want, err := corpus.Build()
	if err != nil {
		return err
	}

	// The documents of the bare loop, converted up front under a
	// placeholder prefix that each round renames.
	base := indices.Names{Prefix: "bench-placeholder-"}
	var items []bulk.Item
	var sampleDocs int
	seen := map[string]bool{}
	for _, r := range recs {
		p, err := record.DecodeProfile(r.Val)
		if err != nil {
			return err
		}
		docs, err := convert.Convert(base, r.Meta, "", p, r.Time)
		if err != nil {
			return err
		}
		for _, s := range docs.Stacks {
			if !seen[s.ID] {
				seen[s.ID] = true
				doc, err := s.Doc()
				if err != nil {
					return err
				}
				items = append(items, bulk.Item{Index: base.Stacks(), ID: s.ID, Create: true, Doc: doc})
			}
		}
		for _, s := range docs.Samples {
			items = append(items, bulk.Item{Index: s.Index, ID: s.ID, Doc: s.Doc})
		}
		sampleDocs += len(docs.Samples)
	}
	fmt.Printf("indexer benchmark: %d hosts x %d profiles of %d pprof samples (raw 1..%d each, zipf %.1f): %d sample docs, %d raw samples (%.1f per doc), %d stacks; %d rounds; shared 2-core machine, numbers under load\n",
		hosts, profiles, corpus.SamplesPerProf, corpus.RawPerSample, corpus.Zipf, sampleDocs, want.Raw, float64(want.Raw)/float64(sampleDocs), len(seen), rounds)

	// The indexer's input: the corpus in Kafka once; each round reads it
	// with a new group into new indices.
	src := indexertest.Setup(t, brokers, url, "bench-ix-"+stamp, 6)
	src.Produce(t, recs)
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{url}, Timeout: time.Minute})
	if err != nil {
		return err
	}

	osPID, err := nodePID(ctx, src)
	if err != nil {
		log.Printf("no CPU accounting of OpenSearch: %v", err)
	}
	var bareDurs, ixDurs []time.Duration
	var bareCPU, ixCPU []cpuUse
	var bareBytes, ixBytes int64
	for round := range rounds {
		bare := withNames(t, src, fmt.Sprintf("bench-bare-%s-r%d", stamp, round))
		ix := withNames(t, src, fmt.Sprintf("bench-ix-%s-r%d", stamp, round))
		runBare := func() error {
			// The same documents, encoded up front, POSTed back to back.
			renamed := make([]bulk.Item, len(items))
			for i, it := range items {
				it.Index = bare.Names.Prefix + strings.TrimPrefix(it.Index, base.Prefix)
				renamed[i] = it
			}
			bodies := encodeBodies(renamed, 8<<20)
			start, cpu := time.Now(), readCPU(osPID)
			for _, b := range bodies {
				if err := post(ctx, bare, b); err != nil {
					return err
				}
			}
			bareDurs = append(bareDurs, time.Since(start))
			bareCPU = append(bareCPU, readCPU(osPID).since(cpu))
			if err := bare.ReadStored(t).Check(want); err != nil {
				return fmt.Errorf("bare loop stored wrong totals: %w", err)
			}
			return nil
		}
		runIx := func() error {
			// The indexer, timed from its first fetch to its last commit.
			d, cpu, err := runIndexer(ctx, t, ix, osc, osPID)
			if err != nil {
				return err
			}
			ixDurs = append(ixDurs, d)
			ixCPU = append(ixCPU, cpu)
			if err := ix.ReadStored(t).Check(want); err != nil {
				return fmt.Errorf("indexer stored wrong totals: %w", err)
			}
			return nil
		}
		// Alternate which goes first: the second pass shares the node with
		// the background merges of the first.
		passes := []func() error{runBare, runIx}
		if round%2 == 1 {
			passes[0], passes[1] = passes[1], passes[0]
		}
		for _, pass := range passes {
			if err := pass(); err != nil {
				return err
			}
		}
		log.Printf("round %d: bare %.1f s (OpenSearch CPU %.1f s), indexer %.1f s (OpenSearch CPU %.1f s, indexer CPU %.1f s): %.0f%%", round,
			bareDurs[round].Seconds(), bareCPU[round].node, ixDurs[round].Seconds(), ixCPU[round].node, ixCPU[round].self, 100*bareDurs[round].Seconds()/ixDurs[round].Seconds())
		if size && round == rounds-1 {
			var err error
			if bareBytes, err = mergedSize(ctx, bare); err != nil {
				return err
			}
			if ixBytes, err = mergedSize(ctx, ix); err != nil {
				return err
			}
		}
	}

	bareDur, ixDur := median(bareDurs), median(ixDurs)
	bareRate := float64(sampleDocs) / bareDur.Seconds()
	ixRate := float64(sampleDocs) / ixDur.Seconds()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "writer\tmedian s\tsample docs/s\traw samples/s\tvs bare\tsamples store bytes\tbytes/raw sample\tbytes/doc\t")
	row := func(name string, d time.Duration, rate float64, bytes int64) {
		store := "-\t-\t-"
		if size {
			store = fmt.Sprintf("%d\t%.2f\t%.1f", bytes, float64(bytes)/float64(want.Raw), float64(bytes)/float64(sampleDocs))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.0f%%\t%s\t\n", name, d.Seconds(), rate, rate*float64(want.Raw)/float64(sampleDocs),
			100*rate/bareRate, store)
	}
	row("bare bulk loop", bareDur, bareRate, bareBytes)
	row("stackstream-indexer", ixDur, ixRate, ixBytes)
	if err := tw.Flush(); err != nil {
		return err
	}
	ratios := make([]time.Duration, len(bareDurs))
	for i := range bareDurs {
		// As a Duration only to reuse median: a ratio in parts per million.
		ratios[i] = time.Duration(1e6 * bareDurs[i].Seconds() / ixDurs[i].Seconds())
	}
	fmt.Printf("indexer / bare per round: median %.0f%%\n", float64(median(ratios))/1e4)
	// CPU per profile does not depend on who else uses the machine: it says
	// which side is the bottleneck when each has its own cores.
	perProfile := func(cpu []cpuUse, f func(cpuUse) float64) float64 {
		v := make([]time.Duration, len(cpu))
		for i, c := range cpu {
			v[i] = time.Duration(f(c) * 1e9)
		}
		return 1e3 * median(v).Seconds() / float64(len(recs))
	}
	node := func(c cpuUse) float64 { return c.node }
	self := func(c cpuUse) float64 { return c.self }
	if osPID > 0 {
		fmt.Printf("CPU ms per profile (median of rounds): OpenSearch %.2f for the bare loop, %.2f for the indexer; the indexer itself %.2f (Kafka client, decoding, bulk requests)\n",
			perProfile(bareCPU, node), perProfile(ixCPU, node), perProfile(ixCPU, self))
	}
	return nil
}

// cpuUse is CPU seconds (user and system) of the OpenSearch node and of
// this process.
type cpuUse struct{ node, self float64 }

func (c cpuUse) since(start cpuUse) cpuUse { return cpuUse{c.node - start.node, c.self - start.self} }

// readCPU reads the CPU time of the node (0 without its pid) and of this
// process from /proc.
func readCPU(nodePID int) cpuUse {
	return cpuUse{node: procCPU(nodePID), self: procCPU(os.Getpid())}
}

// procCPU is utime+stime of a process, 0 when it cannot be read.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses:
	// state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// nodePID is the process ID of the OpenSearch node, when it runs on this
// machine.
func nodePID(ctx context.Context, e *indexertest.Env) (int, error) {
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodGet, "/_nodes/_local/process?filter_path=nodes.*.process.id", nil)
	if err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("node process: %d %s %v", st, body, err)
	}
	var r struct {
		Nodes map[string]struct {
			Process struct {
				ID int `json:"id"`
			} `json:"process"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("node process: %w", err)
	}
	for _, n := range r.Nodes {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/stat", n.Process.ID)); err != nil {
			return 0, fmt.Errorf("node process %d is not on this machine", n.Process.ID)
		}
		return n.Process.ID, nil
	}
	return 0, errors.New("node process: no node")
}

// withNames is src's topics with a new group and index prefix, templates
// applied and removed at the end.
func withNames(t *tb, src *indexertest.Env, name string) *indexertest.Env {
	e := *src
	e.Group = name
	e.Names = indices.Names{Prefix: name + "-"}
	ctx := context.Background()
	if _, err := opensearch.ApplyTemplates(ctx, e.OS, e.Names.Prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opensearch.RemovePrefix(ctx, e.OS, e.Names.Prefix) })
	return &e
}

// runIndexer runs an indexer over e's topic until it committed everything
// and returns the time from its first fetch (joining a group takes a moment
// a running indexer does not pay) to its last commit.
func runIndexer(ctx context.Context, t *tb, e *indexertest.Env, osc *opensearchapi.Client, osPID int) (time.Duration, cpuUse, error) {
	kcl, err := kafka.NewClient(ctx, kafka.Config{Brokers: e.Brokers, DialTimeout: 10 * time.Second},
		append(indexer.ConsumerOpts(e.Group, e.Topics.ProfilesSymbolized), kgo.FetchMaxBytes(64<<20))...)
	if err != nil {
		return 0, cpuUse{}, err
	}
	defer kcl.Close()
	m := indexer.NewMetrics(nil)
	// A short flush interval: a finite corpus ends in a partial batch, which a
	// streaming indexer would fill; its wait is not throughput.
	x := indexer.New(kcl, bulk.New(osc, bulk.Options{Metrics: m.Bulk}), indexer.Options{Names: e.Names, DLQTopic: e.Topics.DLQ, Metrics: m, FlushInterval: 100 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- x.Run(rctx) }()
	for testutil.CollectAndCount(m.Lag) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start, cpu := time.Now(), readCPU(osPID)
	e.WaitCaughtUp(t, 30*time.Minute)
	d, used := time.Since(start), readCPU(osPID).since(cpu)
	cancel()
	return d, used, <-done
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// encodeBodies builds the _bulk bodies of items, each up to max bytes.
func encodeBodies(items []bulk.Item, max int) [][]byte {
	var out [][]byte
	var b bytes.Buffer
	for _, it := range items {
		op := "index"
		if it.Create {
			op = "create"
		}
		line := fmt.Sprintf(`{"%s":{"_index":%q,"_id":%q}}`+"\n", op, it.Index, it.ID)
		if b.Len()+len(line)+len(it.Doc)+1 > max && b.Len() > 0 {
			out = append(out, bytes.Clone(b.Bytes()))
			b.Reset()
		}
		b.WriteString(line)
		b.Write(it.Doc)
		b.WriteByte('\n')
	}
	if b.Len() > 0 {
		out = append(out, b.Bytes())
	}
	return out
}

func post(ctx context.Context, e *indexertest.Env, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/_bulk", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = http.Header{"Content-Type": {"application/x-ndjson"}}
	resp, err := e.OS.Client.Perform(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r struct {
		Errors bool `json:"errors"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r) != nil || r.Errors {
		return fmt.Errorf("bare bulk: HTTP %d: %.300s", resp.StatusCode, raw)
	}
	return nil
}

// mergedSize force-merges the samples indices to one segment and returns
// their primary store size. Until every operation is below the shard's
// retention lease, OpenSearch keeps a copy of each document's source for
// peer recovery (_recovery_source, even with _source disabled) and merges
// keep it too; the lease follows the global checkpoint within about 30 s.
// So the merge waits for that: its size is what a finished daily index
// costs, not what it costs while still being written.
//
// A merge only rewrites an index of several live segments, so a marker
// document (value 0, in its own segment) is added to each index first: the
// force merge then rewrites every segment.
//
// Whether a merge could drop them depends on commit and lease timing that
// the API does not show, so the merge is repeated until the size holds.
func mergedSize(ctx context.Context, e *indexertest.Env) (int64, error) {
	var last int64
	for pass := 1; ; pass++ {
		size, err := mergeOnce(ctx, e)
		if err != nil {
			return 0, err
		}
		log.Printf("%s: %d bytes after merge %d", e.Names.SamplesPattern(), size, pass)
		if pass == 4 || (last > 0 && size > last*99/100) {
			return size, nil
		}
		last = size
	}
}

func mergeOnce(ctx context.Context, e *indexertest.Env) (int64, error) {
	pattern := e.Names.SamplesPattern()
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodGet, "/_cat/indices/"+pattern+"?h=index", nil)
	if err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("list indices: %d %s %v", st, body, err)
	}
	for i, index := range strings.Fields(string(body)) {
		marker := `{"@timestamp":"2000-01-01T00:00:00Z","type":"bench-marker","host":"-","service":"-","value":0}`
		path := fmt.Sprintf("/%s/_doc/bench-marker-%d-%d?refresh=true", index, time.Now().UnixNano(), i)
		if st, resp, err := opensearch.Raw(ctx, e.OS, http.MethodPut, path, []byte(marker)); err != nil || st >= 300 {
			return 0, fmt.Errorf("marker in %s: %d %s %v", index, st, resp, err)
		}
	}
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_flush", nil); err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("flush: %d %s %v", st, body, err)
	}
	start := time.Now()
	for {
		behind, err := leasesBehind(ctx, e, pattern)
		if err != nil {
			return 0, err
		}
		if behind == 0 {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return 0, fmt.Errorf("retention leases still %d operations behind after 3 min", behind)
		}
		time.Sleep(time.Second)
	}
	log.Printf("retention leases caught up after %.0f s; force merge", time.Since(start).Seconds())
	// A commit made now is "safe" (the global checkpoint covers it), which
	// is what lets the merge drop the recovery sources.
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_flush?force=true", nil); err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("flush: %d %s %v", st, body, err)
	}
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_forcemerge?max_num_segments=1", nil); err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("force merge: %d %s %v", st, body, err)
	}
	opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_refresh", nil)
	// Store stats are cached for index.store.stats_refresh_interval (10 s):
	// read them once that has passed since the merge.
	time.Sleep(11 * time.Second)
	return opensearch.StoreBytes(ctx, e.OS, pattern)
}

// leasesBehind is how many operations of the indices' primaries are not yet
// below every retention lease.
func leasesBehind(ctx context.Context, e *indexertest.Env, pattern string) (int64, error) {
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodGet, "/"+pattern+"/_stats/docs?level=shards", nil)
	if err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("shard stats: %d %s %v", st, body, err)
	}
	return indexertest.LeasesBehind(body)
}
