package ctl

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// buildServices builds the indexer and rollup binaries the reindex runs.
func buildServices(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"indexer", "rollup"} {
		testenv.Run(t, filepath.Join(root, s), nil, "go", "build", "-o", filepath.Join(dir, "stackstream-"+s), "./cmd/stackstream-"+s)
	}
	return dir
}

// rxEnv is one test's topics, groups and index prefix on the shared services.
type rxEnv struct {
	cfg   Config
	names indices.Names
	env   []string // what every child consumer gets
	bin   string
	kcl   *kgo.Client
	adm   *kadm.Client
	osc   *opensearchapi.Client
}

func (e *rxEnv) starter(t *testing.T) Starter {
	return func(ctx context.Context, service string, env []string) (func() error, <-chan struct{}, func() error, error) {
		cmd := exec.Command(filepath.Join(e.bin, "stackstream-"+service))
		cmd.Env = append(append(os.Environ(), e.env...), env...)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			return nil, nil, nil, err
		}
		done := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(done) }()
		stop := func() error {
			select {
			case <-done:
			default:
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(time.Minute):
					cmd.Process.Kill()
					<-done
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("%s %v:\n%s", service, env, lastLines(logs.String(), 15))
			}
			return nil
		}
		t.Cleanup(func() { stop() })
		return stop, done, func() error { return waitErr }, nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func setupReindex(t *testing.T) *rxEnv {
	t.Helper()
	ctx := context.Background()
	brokers, url := testenv.KafkaBrokers(t), testenv.OpenSearchURL(t)
	name := testenv.Name(t, "rx-")
	e := &rxEnv{bin: buildServices(t), names: indices.Names{Prefix: name + "-"}}
	e.cfg.Kafka = kafka.Config{Brokers: brokers, TopicPrefix: name + ".", DialTimeout: 10 * time.Second}
	e.cfg.OpenSearch = opensearch.Config{URLs: []string{url}, Timeout: 30 * time.Second}
	e.cfg.Index = opensearch.IndexConfig{Prefix: e.names.Prefix, Shards: 1, Replicas: 0, RefreshInterval: "1s"}
	e.env = []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + e.cfg.Kafka.TopicPrefix,
		"STACKSTREAM_OPENSEARCH_URL=" + url,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + e.names.Prefix,
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_LISTEN_ADDR=127.0.0.1:0",
		"STACKSTREAM_INDEXER_FLUSH_INTERVAL=200ms",
		"STACKSTREAM_ROLLUP_IDLE_FLUSH=1s",
	}
	var err error
	e.kcl, err = kafka.NewClient(ctx, e.cfg.Kafka, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.kcl.Close)
	e.adm = kadm.NewClient(e.kcl)
	topics := e.cfg.Kafka.Topics()
	if _, err := kafka.EnsureTopics(ctx, e.adm, kafka.Specs(topics, 2, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.adm.DeleteTopics(context.Background(), topics.All()...) })
	e.osc, err = opensearch.NewClient(ctx, e.cfg.OpenSearch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), e.osc, e.names.Prefix) })
	return e
}

// produce writes n CPU profiles of distinct hosts at times at(i), each
// with one process (one samples document) and one of 25 stacks.
func (e *rxEnv) produce(t *testing.T, first, n int, at func(i int) time.Time) {
	t.Helper()
	var recs []*kgo.Record
	for i := first; i < first+n; i++ {
		host := fmt.Sprintf("host-%04d", i)
		b := pproftest.NewCPU(at(i), 10*time.Second)
		b.Sample(map[string]string{record.LabelPID: "100", record.LabelComm: "app"}, []int64{3, 30_000_000}, "main.main", fmt.Sprintf("main.work%d", i%25))
		v, err := record.EncodeProfileStored(b.Profile())
		if err != nil {
			t.Fatal(err)
		}
		meta := record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "test"}
		recs = append(recs, &kgo.Record{Topic: e.cfg.Kafka.Topics().ProfilesSymbolized, Key: []byte(host), Value: v, Headers: meta.Headers(), Timestamp: at(i)})
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// produceLive is produce at the current time from a goroutine: it reports
// a failure instead of stopping the test.
func (e *rxEnv) produceLive(t *testing.T, first, n int) bool {
	var recs []*kgo.Record
	for i := first; i < first+n; i++ {
		host := fmt.Sprintf("host-%04d", i)
		at := time.Now()
		b := pproftest.NewCPU(at, 10*time.Second)
		b.Sample(map[string]string{record.LabelPID: "100", record.LabelComm: "app"}, []int64{3, 30_000_000}, "main.main", fmt.Sprintf("main.work%d", i%25))
		v, err := record.EncodeProfileStored(b.Profile())
		if err != nil {
			t.Error(err)
			return false
		}
		meta := record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "test"}
		recs = append(recs, &kgo.Record{Topic: e.cfg.Kafka.Topics().ProfilesSymbolized, Key: []byte(host), Value: v, Headers: meta.Headers(), Timestamp: at})
	}
	if err := e.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Errorf("produce: %v", err)
		return false
	}
	return true
}

// caughtUp waits until every group has committed the topic's end.
func (e *rxEnv) caughtUp(t *testing.T, groups ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := e.cfg.Kafka.Topics().ProfilesSymbolized
	listed, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	var out bytes.Buffer
	if err := waitPast(ctx, e.adm, groups, topic, ends, nil, time.Second, &out); err != nil {
		t.Fatalf("groups %v did not catch up: %v\n%s", groups, err, lastLines(out.String(), 5))
	}
}

// serving counts what readers see through the names services use, after a
// refresh.
func (e *rxEnv) serving(t *testing.T) DocCounts {
	t.Helper()
	ctx := context.Background()
	if st, body, err := opensearch.Raw(ctx, e.osc, http.MethodPost, "/"+e.names.Prefix+"*/_refresh", nil); err != nil || st != http.StatusOK {
		t.Fatalf("refresh: %d %s %v", st, body, err)
	}
	c, err := generationCounts(ctx, e.osc, e.names, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// written are the documents the consumers write, not the lifecycle's: the
// live rollup's lifecycle passes change those at any time.
func written(c DocCounts) DocCounts {
	c.Lifecycle = 0
	return c
}

// settled is serving once two reads 2 s apart agree on what the consumers
// wrote: the live rollup
// writes its open windows when a partition has been idle for its
// STACKSTREAM_ROLLUP_IDLE_FLUSH (1 s here), after its position has moved.
func (e *rxEnv) settled(t *testing.T) DocCounts {
	t.Helper()
	prev := e.serving(t)
	for range 30 {
		time.Sleep(2 * time.Second)
		got := e.serving(t)
		if written(got) == written(prev) {
			return got
		}
		prev = got
	}
	t.Fatalf("the serving counts did not settle: last %v", prev)
	return prev
}

// reader counts through the serving names in a loop until stopped: the
// samples never fewer than floor nor more than produced, every stack, and
// at least the history's rollups (no empty, partial or doubled answer). Answers OpenSearch marks incomplete (shards of an
// index deleted while the search ran) are counted apart, when allowed.
type reader struct {
	stacks, rollupsFloor int64 // stacks are all there, rollups of the history at least
	floor, produced      atomic.Int64
	allowIncomplete      atomic.Bool
	reads                atomic.Int64
	incomplete           atomic.Int64
	wrong                atomic.Value
	stop                 chan struct{}
	wg                   sync.WaitGroup
}

func (e *rxEnv) startReader(stacks, rollupsFloor int64) *reader {
	r := &reader{stop: make(chan struct{}), stacks: stacks, rollupsFloor: rollupsFloor}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			c, err := generationCounts(context.Background(), e.osc, e.names, 0)
			n := c.Samples
			switch {
			case err != nil && r.allowIncomplete.Load() && (strings.Contains(err.Error(), "shards answered") || strings.Contains(err.Error(), "all shards failed")):
				r.incomplete.Add(1)
			case err != nil:
				r.wrong.Store(err.Error())
				return
			case n < r.floor.Load() || n > r.produced.Load():
				r.wrong.Store(fmt.Sprintf("a reader saw %d samples documents, want between %d and %d", n, r.floor.Load(), r.produced.Load()))
				return
			case c.Stacks != r.stacks || c.Rollups < r.rollupsFloor:
				r.wrong.Store(fmt.Sprintf("a reader saw %d stacks and %d rollups, want %d and at least %d", c.Stacks, c.Rollups, r.stacks, r.rollupsFloor))
				return
			default:
				r.reads.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return r
}

func (r *reader) halt(t *testing.T) {
	t.Helper()
	close(r.stop)
	r.wg.Wait()
	if w := r.wrong.Load(); w != nil {
		t.Fatal(w)
	}
}

// TestReindex runs the live indexer and rollup (the real binaries) on a
// topic with history, then stackctl reindex twice while a producer keeps
// adding profiles and a reader counts through the serving names: first the
// migration from generation 0 (which needs --delete-old), then generation 1
// to 2. The reader never sees an empty, partial-history or doubled result
// (bar answers OpenSearch itself marks incomplete, during the migration
// only); afterwards the serving counts equal what was produced, the new
// generation holds exactly the documents the old one did, and the old
// generation is gone.
func TestReindex(t *testing.T) {
	e := setupReindex(t)
	// A bound for a stuck run, not a timing: two reindexes under other
	// tests' load took past 6 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	live := map[string]string{"indexer": e.names.Prefix + "indexer", "rollup": e.names.Prefix + "rollup"}
	start := e.starter(t)
	for _, s := range []string{"indexer", "rollup"} {
		if _, _, _, err := start(ctx, s, []string{"STACKSTREAM_" + strings.ToUpper(s) + "_GROUP=" + live[s]}); err != nil {
			t.Fatal(err)
		}
	}

	// History: 300 profiles over the last 3 hours (two days at some hours).
	const history = 300
	now := time.Now().UTC().Truncate(time.Second)
	e.produce(t, 0, history, func(i int) time.Time { return now.Add(-3 * time.Hour).Add(time.Duration(i) * 30 * time.Second) })
	e.caughtUp(t, live["indexer"], live["rollup"])
	historic := e.serving(t)
	if historic.Stacks != 25 || historic.Samples != history || historic.Rollups == 0 {
		t.Fatalf("the live consumers stored %v (stacks, samples, rollups), want 25, %d, >0", historic, history)
	}

	// The live consumers keep serving a producer during the reindex.
	var produced atomic.Int64
	produced.Store(history)
	stopProducing := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := history; ; i += 5 {
			select {
			case <-stopProducing:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if !e.produceLive(t, i, 5) {
				return
			}
			produced.Add(5)
		}
	}()
	rd := e.startReader(25, historic.Rollups)
	rd.floor.Store(history)
	go func() {
		for {
			select {
			case <-rd.stop:
				return
			case <-time.After(20 * time.Millisecond):
				rd.produced.Store(produced.Load())
			}
		}
	}()
	rd.produced.Store(produced.Load())

	reindexIn := func(ctx context.Context, opts ReindexOptions) (ReindexSummary, string, error) {
		if opts.IndexerGroup == "" {
			opts.IndexerGroup = live["indexer"]
		}
		if opts.Starter == nil {
			opts.Starter = start
		}
		opts.RollupGroup, opts.Run, opts.Interval = live["rollup"], true, 500*time.Millisecond
		var out bytes.Buffer
		sum, err := Reindex(ctx, e.cfg, e.adm, e.osc, opts, &out)
		t.Logf("stackctl reindex:\n%s", out.String())
		return sum, out.String(), err
	}
	reindex := func(deleteOld bool) (ReindexSummary, string, error) {
		var out bytes.Buffer
		sum, err := Reindex(ctx, e.cfg, e.adm, e.osc, ReindexOptions{
			IndexerGroup: live["indexer"], RollupGroup: live["rollup"], DeleteOld: deleteOld,
			Run: true, Starter: start, Interval: 500 * time.Millisecond,
		}, &out)
		t.Logf("stackctl reindex:\n%s", out.String())
		return sum, out.String(), err
	}

	// A live group that does not exist is refused: the temporary one could
	// not be compared with it.
	if _, _, err := reindexIn(ctx, ReindexOptions{IndexerGroup: "no-such-group", DeleteOld: true}); err == nil || !strings.Contains(err.Error(), "--indexer-group") {
		t.Fatalf("a reindex naming a missing live group: %v", err)
	}
	// Generation 0 is replaced only with --delete-old.
	if _, _, err := reindex(false); err == nil || !strings.Contains(err.Error(), "--delete-old") {
		t.Fatalf("a migration without --delete-old: %v", err)
	}
	rd.allowIncomplete.Store(true)
	sum, out, err := reindex(true)
	if err != nil {
		t.Fatal(err)
	}
	rd.allowIncomplete.Store(false)
	if sum.From != 0 || sum.To != 1 || len(sum.Swap.Removed) == 0 || len(sum.Swap.Kept) != 0 {
		t.Fatalf("migration: %+v", sum)
	}
	for _, want := range []string{"records left", "records/s", "swapped in one request", "summary: generation 0 -> 1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the output lacks %q", want)
		}
	}
	l, err := opensearch.ReadLayout(ctx, e.osc, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if g := l.Generations(); !slices.Equal(g, []int{1}) || l.Current(e.names) != 1 {
		t.Fatalf("after the migration: generations %v, current %d", g, l.Current(e.names))
	}

	// Generation 1 to 2, the producer still running; the reader must see
	// no incomplete answer now (the old generation stays until the swap
	// is done).
	sum, _, err = reindex(true)
	if err != nil {
		t.Fatal(err)
	}
	if sum.From != 1 || sum.To != 2 || len(sum.Swap.Moved) == 0 || len(sum.Swap.Removed) != 0 || len(sum.Deleted) == 0 {
		t.Fatalf("generation 1 to 2: %+v", sum)
	}
	close(stopProducing)
	pwg.Wait()
	rd.produced.Store(produced.Load())
	rd.halt(t)
	t.Logf("reader: %d exact answers, %d marked incomplete by OpenSearch during the migration", rd.reads.Load(), rd.incomplete.Load())

	if l, err = opensearch.ReadLayout(ctx, e.osc, e.names); err != nil {
		t.Fatal(err)
	}
	if g := l.Generations(); !slices.Equal(g, []int{2}) {
		t.Fatalf("after --delete-old: generations %v, want [2]", g)
	}
	for _, p := range l {
		if len(p.Aliases) != 1 || p.Aliases[0] != p.Name {
			t.Fatalf("%s serves %v, want its name %s", p.Index, p.Aliases, p.Name)
		}
	}
	e.caughtUp(t, live["indexer"], live["rollup"])
	got := e.settled(t)
	if got.Stacks != 25 || got.Samples != produced.Load() {
		t.Fatalf("after both reindexes the names serve %v (stacks, samples, rollups), want 25 stacks and %d samples", got, produced.Load())
	}

	// Without a producer, a third generation holds exactly what the second
	// does, rollups included (bar the lifecycle's: written(), counts.go);
	// the first attempt is interrupted (its temporary consumers stopped with
	// it) and the second resumes it.
	before := written(got)
	// Interrupted once both temporary consumers run, before they can catch
	// up and swap (a fixed timeout let a fast machine finish the swap).
	short, stopShort := context.WithCancel(ctx)
	interrupt := func(c context.Context, service string, env []string) (func() error, <-chan struct{}, func() error, error) {
		stop, done, exitErr, err := start(c, service, env)
		if service == "rollup" {
			stopShort()
		}
		return stop, done, exitErr, err
	}
	_, _, err = reindexIn(short, ReindexOptions{DeleteOld: true, Starter: interrupt})
	stopShort()
	if err == nil {
		t.Fatal("an interrupted reindex returned no error")
	}
	if g := written(e.serving(t)); g != before {
		t.Fatalf("an interrupted reindex changed what the names serve: %v, was %v", g, before)
	}
	sum, out, err = reindex(true)
	if err == nil && !strings.Contains(out, "resuming") {
		t.Fatalf("the second attempt did not resume generation 3:\n%s", out)
	}
	if err != nil {
		t.Fatal(err)
	}
	if after := written(e.serving(t)); after != before || written(sum.Counts[2]) != before || written(sum.Counts[3]) != before {
		t.Fatalf("generation 3 serves %v (%v at the swap), generation 2 held %v at the swap and %v before", after, sum.Counts[3], sum.Counts[2], before)
	}
	// The live rollup's lifecycle writes the new generation's fleet heads
	// (its filling rollup wrote none): within a pass of the fleet heads
	// (STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL, 1 minute).
	rollups3 := e.names.GenerationPatterns(3)[2]
	waitFleetHeads := time.Now().Add(3 * time.Minute)
	for {
		n, err := Count(ctx, e.osc, rollups3, map[string]any{"term": map[string]any{"kind": indices.KindFleetHead}})
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Logf("the live rollup wrote %d fleet heads in generation 3", n)
			break
		}
		if time.Now().After(waitFleetHeads) {
			t.Fatalf("no fleet head in generation 3 3 minutes after the swap: the live rollup's lifecycle does not maintain the new generation")
		}
		time.Sleep(2 * time.Second)
	}
	// stackctl status shows the serving generation and what each index serves as.
	var status bytes.Buffer
	if err := Status(ctx, e.cfg, e.adm, e.osc, &status); err != nil {
		t.Fatal(err)
	}
	stacks3 := e.names.Physical(3, e.names.Stacks())
	if !strings.Contains(status.String(), e.names.Prefix+"  3 ") && !strings.Contains(status.String(), "[3]") ||
		!regexp.MustCompile(regexp.QuoteMeta(stacks3)+` +`+regexp.QuoteMeta(e.names.Stacks())+` `).MatchString(status.String()) {
		t.Fatalf("stackctl status does not show generation 3 serving:\n%s", status.String())
	}
	var groups []string
	listed, _ := e.adm.ListGroups(ctx)
	for _, g := range listed.Groups() {
		if strings.Contains(g, ".reindex-g") && strings.HasPrefix(g, e.names.Prefix) {
			groups = append(groups, g)
		}
	}
	if len(groups) > 0 {
		t.Fatalf("temporary groups left behind: %v", groups)
	}
}
