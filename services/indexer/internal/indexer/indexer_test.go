package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

func setup(t *testing.T, partitions int32) *indexertest.Env {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	url := testenv.OpenSearchURL(t)
	return indexertest.Setup(t, brokers, url, testenv.Name(t, "ix-"), partitions)
}

func smallCorpus(profilesPerHost int) indexertest.Corpus {
	return indexertest.Corpus{
		Seed: 1, Hosts: 4, ProfilesPerHost: profilesPerHost,
		Start: time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC), Interval: 10 * time.Second,
		Stacks: 40, Depth: 12, Processes: 5, SamplesPerProf: 60, RawPerSample: 5,
	}
}

// running is an indexer in this process.
type running struct {
	cancel  context.CancelFunc
	done    chan error
	metrics *indexer.Metrics
}

// start runs an indexer of e's group writing to osURL, with opts applied to
// its Options.
func start(t *testing.T, e *indexertest.Env, osURL string, opts ...func(*indexer.Options)) *running {
	t.Helper()
	ctx := context.Background()
	kcl, err := kafka.NewClient(ctx, kafka.Config{Brokers: e.Brokers, DialTimeout: 10 * time.Second},
		indexer.ConsumerOpts(e.Group, e.Topics.ProfilesSymbolized)...)
	if err != nil {
		t.Fatal(err)
	}
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{osURL}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := indexer.NewMetrics(nil)
	o := indexer.Options{
		Names: e.Names, DLQTopic: e.Topics.DLQ, FlushInterval: 200 * time.Millisecond, ShutdownTimeout: 5 * time.Second, Metrics: m,
	}
	for _, f := range opts {
		f(&o)
	}
	ix := indexer.New(kcl, bulk.New(osc, bulk.Options{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Metrics: m.Bulk}), o)
	rctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan error, 1), metrics: m}
	go func() {
		err := ix.Run(rctx)
		kcl.Close()
		r.done <- err
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("indexer Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("indexer did not stop within 30 s")
	}
}

func TestExactSumsAndReplay(t *testing.T) {
	e := setup(t, 3)
	recs, want, err := smallCorpus(15).Build()
	if err != nil {
		t.Fatal(err)
	}
	e.Produce(t, recs)
	r := start(t, e, e.URL)
	e.WaitCaughtUp(t, 2*time.Minute)
	first := e.ReadStored(t)
	if err := first.Check(want); err != nil {
		t.Fatalf("after the first pass: %v", err)
	}
	stacks := e.CountDocs(t, e.Names.Stacks())
	if stacks != int64(len(want.Value)) {
		t.Fatalf("stacks index holds %d documents, want %d", stacks, len(want.Value))
	}
	r.stop(t)

	// Replay: reset the group to the start of the topic and index it all again.
	resetGroup(t, e)
	if com := e.Committed(t); len(com) == 0 || com[0] != 0 {
		t.Fatalf("group not reset: %v", com)
	}
	start(t, e, e.URL)
	e.WaitCaughtUp(t, 2*time.Minute)
	again := e.ReadStored(t)
	if err := again.Check(want); err != nil {
		t.Fatalf("after the replay: %v", err)
	}
	if again.Docs != first.Docs {
		t.Fatalf("replay changed the document count: %d, was %d", again.Docs, first.Docs)
	}
	if n := e.CountDocs(t, e.Names.Stacks()); n != stacks {
		t.Fatalf("replay changed the stacks count: %d, was %d", n, stacks)
	}
}

func resetGroup(t *testing.T, e *indexertest.Env) {
	t.Helper()
	var os kadm.Offsets
	for p := range e.Ends(t) {
		os.Add(kadm.Offset{Topic: e.Topics.ProfilesSymbolized, Partition: p, At: 0, LeaderEpoch: -1})
	}
	resp, err := e.Adm.CommitOffsets(context.Background(), e.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("reset group: %v", err)
	}
}

// TestOpenSearchOutage cuts the indexer's OpenSearch connection for 30 s in
// the middle of the stream: nothing is committed past what was stored, and
// after the cut the totals are exact.
func TestOpenSearchOutage(t *testing.T) {
	e := setup(t, 2)
	recs, want, err := smallCorpus(20).Build()
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, strings.TrimPrefix(e.URL, "http://"))
	start(t, e, "http://"+proxy.Addr())
	half := len(recs) / 2
	e.Produce(t, recs[:half])
	e.WaitCaughtUp(t, 2*time.Minute)
	before := e.Committed(t)

	proxy.SetDown(true)
	e.Produce(t, recs[half:])
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		now := e.Committed(t)
		for p, off := range now {
			if off != before[p] {
				t.Fatalf("partition %d committed %d during the outage (was %d): offsets moved past what OpenSearch stored", p, off, before[p])
			}
		}
		time.Sleep(time.Second)
	}
	proxy.SetDown(false)
	e.WaitCaughtUp(t, 2*time.Minute)
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
}

// TestDeadLetters sends a record that cannot be decoded and one whose sample
// document the index refuses: both go to the DLQ with a reason, and every
// other record is stored.
func TestDeadLetters(t *testing.T) {
	e := setup(t, 1)
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	meta := record.Meta{Type: record.ProfileCPU, Host: "h1"}
	mk := func(labels map[string]string, stack ...string) indexertest.Record {
		v, err := record.EncodeProfile(pproftest.NewCPU(at, time.Second).Sample(labels, []int64{1, 100}, stack...).Profile())
		if err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Second)
		return indexertest.Record{Host: "h1", Meta: meta, Time: at, Val: v}
	}
	// The day's index with label_pairs made a long by hand: a document with
	// labels outside the contract is refused with a mapping error.
	body := `{"mappings":{"properties":{"label_pairs":{"type":"long"}}}}`
	if st, resp, err := opensearch.Raw(context.Background(), e.OS, http.MethodPut, "/"+e.Names.Samples(at), []byte(body)); err != nil || st != http.StatusOK {
		t.Fatalf("create index: %d %s %v", st, resp, err)
	}
	e.Produce(t, []indexertest.Record{mk(map[string]string{"comm": "a"}, "a")})
	r := start(t, e, e.URL)
	e.WaitCaughtUp(t, time.Minute)

	bad := mk(map[string]string{"x": "2"}, "b")
	good := mk(map[string]string{"comm": "c"}, "c")
	garbage := indexertest.Record{Host: "h1", Meta: meta, Time: at, Val: []byte("not a profile")}
	e.Produce(t, []indexertest.Record{bad, garbage, good})
	e.WaitCaughtUp(t, time.Minute)
	r.stop(t)

	dlq := e.ReadDLQ(t, 2, 30*time.Second)
	if len(dlq) != 2 {
		t.Fatalf("%d DLQ records, want 2", len(dlq))
	}
	reasons := map[int64]string{}
	for _, d := range dlq {
		if record.HeaderValue(d.Headers, record.HeaderDLQTopic) != e.Topics.ProfilesSymbolized ||
			record.HeaderValue(d.Headers, record.HeaderDLQService) != indexer.Service {
			t.Fatalf("DLQ headers %v", d.Headers)
		}
		var off int64
		for _, c := range record.HeaderValue(d.Headers, record.HeaderDLQOffset) {
			off = off*10 + int64(c-'0')
		}
		reasons[off] = record.HeaderValue(d.Headers, record.HeaderDLQReason)
	}
	if !strings.HasPrefix(reasons[1], indexer.ReasonRejected+": ") || !strings.Contains(reasons[1], "HTTP 400") || !strings.Contains(reasons[1], "label_pairs") {
		t.Fatalf("mapping reject reason = %q", reasons[1])
	}
	if !strings.HasPrefix(reasons[2], indexer.ReasonNotGzip+": ") || !strings.Contains(reasons[2], "not gzip") {
		t.Fatalf("undecodable reason = %q", reasons[2])
	}
	for _, reason := range []string{indexer.ReasonRejected, indexer.ReasonNotGzip} {
		if n := testutil.ToFloat64(r.metrics.DLQ.WithLabelValues(reason)); n != 1 {
			t.Fatalf("dlq_total{reason=%q} = %v, want 1", reason, n)
		}
	}
	if n := e.CountDocs(t, e.Names.SamplesPattern()); n != 2 {
		t.Fatalf("samples index holds %d docs, want the 2 valid ones", n)
	}
	// The stack of the rejected record is stored: stacks are harmless and
	// the record in the DLQ can be replayed once the mapping is fixed.
	if n := e.CountDocs(t, e.Names.Stacks()); n != 3 {
		t.Fatalf("stacks index holds %d docs, want 3", n)
	}
}

// TestShutdownCommitsBatchInHand stops the indexer while it holds records in
// an unflushed batch: they are written and committed before Run returns.
func TestShutdownCommitsBatchInHand(t *testing.T) {
	e := setup(t, 1)
	recs, want, err := smallCorpus(3).Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kcl, err := kafka.NewClient(ctx, kafka.Config{Brokers: e.Brokers, DialTimeout: 10 * time.Second},
		indexer.ConsumerOpts(e.Group, e.Topics.ProfilesSymbolized)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{e.URL}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A flush interval longer than the test: only shutdown can flush.
	ix := indexer.New(kcl, bulk.New(osc, bulk.Options{}), indexer.Options{Names: e.Names, DLQTopic: e.Topics.DLQ, FlushInterval: time.Hour})
	e.Produce(t, recs)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ix.Run(rctx) }()
	// Wait until the records are fetched (lag metric is not exported here:
	// poll the group's assignment through a short sleep loop instead).
	time.Sleep(5 * time.Second)
	if com := e.Committed(t); com[0] != 0 {
		t.Fatalf("committed %v before shutdown with a one-hour flush interval", com)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.WaitCaughtUp(t, 10*time.Second)
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionDeletesExpiredDays(t *testing.T) {
	e := setup(t, 1)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	days := []time.Time{now.AddDate(0, 0, -10), now.AddDate(0, 0, -8), now.AddDate(0, 0, -7), now.AddDate(0, 0, -1), now}
	for _, d := range days {
		if st, body, err := opensearch.Raw(ctx, e.OS, "PUT", "/"+e.Names.Samples(d), nil); err != nil || st != 200 {
			t.Fatalf("create %s: %d %s %v", e.Names.Samples(d), st, body, err)
		}
	}
	// Another prefix's index must survive: retention only reads its own pattern.
	other := e.Names.Prefix + "x-samples-2000.01.01"
	opensearch.Raw(ctx, e.OS, "PUT", "/"+other, nil)
	defer opensearch.Raw(ctx, e.OS, "DELETE", "/"+other, nil)

	r := &indexer.Retention{Client: e.OS, Names: e.Names, Days: 7, Now: func() time.Time { return now }}
	deleted, err := r.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Day -7 ended 6 days and 1 hour ago, so it still holds events younger
	// than 7 days and stays; days -8 and -10 go.
	want := map[string]bool{e.Names.Samples(days[0]): true, e.Names.Samples(days[1]): true}
	if len(deleted) != len(want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	for _, d := range deleted {
		if !want[d] {
			t.Fatalf("deleted %s, want only %v", d, want)
		}
	}
	for _, d := range days[2:] {
		if st, _, _ := opensearch.Raw(ctx, e.OS, "HEAD", "/"+e.Names.Samples(d), nil); st != 200 {
			t.Fatalf("%s was deleted", e.Names.Samples(d))
		}
	}
	if st, _, _ := opensearch.Raw(ctx, e.OS, "HEAD", "/"+other, nil); st != 200 {
		t.Fatalf("another prefix's index %s was deleted", other)
	}
}

// TestSecondInstanceJoinsUnderLoad starts a second indexer while records keep
// arriving: the first one's write pipeline never idles, so the rebalance must
// get through by draining it (MaxRebalanceDelay), and totals stay exact.
func TestSecondInstanceJoinsUnderLoad(t *testing.T) {
	e := setup(t, 4)
	c := smallCorpus(40)
	c.Hosts = 8
	recs, want, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	first := start(t, e, e.URL)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range recs {
			e.Produce(t, recs[i:i+1])
			time.Sleep(40 * time.Millisecond)
		}
	}()
	time.Sleep(3 * time.Second)
	second := start(t, e, e.URL)
	deadline := time.Now().Add(45 * time.Second)
	for testutil.ToFloat64(second.metrics.Records.WithLabelValues("indexed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second instance indexed nothing within 45 s of joining under load")
		}
		time.Sleep(200 * time.Millisecond)
	}
	<-produced
	e.WaitCaughtUp(t, 2*time.Minute)
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(first.metrics.Records.WithLabelValues("indexed")) == 0 {
		t.Fatal("the first instance indexed nothing")
	}
}

// TestBatchFillsWhileWriteInFlight holds the first bulk request at a proxy in
// front of OpenSearch: records that arrive meanwhile are still converted into
// the next batch, even after it is due, and go out in one request when the
// write ends, without the stacks the held request carries; nothing is
// committed before it is stored.
func TestBatchFillsWhileWriteInFlight(t *testing.T) {
	e := setup(t, 2)
	recs, want, err := smallCorpus(6).Build()
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var bulks atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk") {
			bulks.Add(1)
			<-release
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()

	// One batch in flight (TestSlowBatchHoldsLaterCommits has several).
	run := start(t, e, srv.URL, func(o *indexer.Options) { o.MaxInFlight = 1 })
	decoded := func() int {
		return int(testutil.ToFloat64(run.metrics.Decoded.WithLabelValues("fast")) + testutil.ToFloat64(run.metrics.Decoded.WithLabelValues("general")))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (bulk requests %d, records decoded %d)", what, bulks.Load(), decoded())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	e.Produce(t, recs[:1])
	waitFor("the first bulk request", func() bool { return bulks.Load() == 1 })
	e.Produce(t, recs[1:11])
	waitFor("the second batch's first records", func() bool { return decoded() == 11 })
	time.Sleep(600 * time.Millisecond) // three flush intervals: the batch is due
	e.Produce(t, recs[11:])
	waitFor("the records that arrived after the batch was due", func() bool { return decoded() == len(recs) })
	if c := e.Committed(t); len(c) != 0 {
		t.Fatalf("committed %v while the first write was held", c)
	}
	free()
	e.WaitCaughtUp(t, time.Minute)
	if n := bulks.Load(); n != 2 {
		t.Errorf("%d bulk requests, want 2: the held one, then everything that arrived meanwhile", n)
	}
	// The second batch did not send again the stacks the held one carried.
	if n := testutil.ToFloat64(run.metrics.Bulk.Docs.WithLabelValues("existed")); n != 0 {
		t.Errorf("%v stack documents sent twice (409)", n)
	}
	if err := e.ReadStored(t).Check(want); err != nil {
		t.Fatal(err)
	}
}

// TestStacksLastSeenAndPrune: stacks record the newest day a profile used
// them (not moved back by a replay of older days), and retention deletes
// those unused for longer than StacksDays, never one without last_seen.
func TestStacksLastSeenAndPrune(t *testing.T) {
	e := setup(t, 1)
	ctx := context.Background()
	day1 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	day2 := day1.AddDate(0, 0, 2)
	corpus := func(at time.Time) []indexertest.Record {
		c := smallCorpus(2)
		c.Start = at
		recs, _, err := c.Build()
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	lastSeen := func() map[string]int {
		t.Helper()
		opensearch.Raw(ctx, e.OS, "POST", "/"+e.Names.Stacks()+"/_refresh", nil)
		st, body, err := opensearch.Raw(ctx, e.OS, "POST", "/"+e.Names.Stacks()+"/_search", []byte(`{"size":0,"aggs":{"d":{"terms":{"field":"last_seen","missing":"1970-01-01","size":10}}}}`))
		if err != nil || st != 200 {
			t.Fatalf("search stacks: %d %.300s %v", st, body, err)
		}
		var resp struct {
			Aggregations struct {
				D struct {
					Buckets []struct {
						Key   any `json:"key_as_string"`
						Raw   any `json:"key"`
						Count int `json:"doc_count"`
					} `json:"buckets"`
				} `json:"d"`
			} `json:"aggregations"`
		}
		json.Unmarshal(body, &resp)
		out := map[string]int{}
		for _, b := range resp.Aggregations.D.Buckets {
			k := fmt.Sprint(b.Key)
			if b.Key == nil {
				k = fmt.Sprint(b.Raw)
			}
			out[k] += b.Count
		}
		return out
	}
	r := start(t, e, e.URL)
	e.Produce(t, corpus(day1))
	e.WaitCaughtUp(t, 30*time.Second)
	first := lastSeen()
	if len(first) != 1 || first["2026-11-27"] == 0 {
		t.Fatalf("after day 1: stacks by last_seen %v, want all 2026-11-27", first)
	}
	n := first["2026-11-27"]
	e.Produce(t, corpus(day2))
	e.WaitCaughtUp(t, 30*time.Second)
	e.Produce(t, corpus(day1)) // a replay of the older day
	e.WaitCaughtUp(t, 30*time.Second)
	r.stop(t)
	if got := lastSeen(); len(got) != 1 || got["2026-11-29"] != n {
		t.Fatalf("after day 2 and a replay of day 1: %v, want all %d on 2026-11-29", got, n)
	}

	// A stack stored before last_seen existed.
	legacy := `{"@timestamp":"2026-01-01T00:00:00Z","frames":[{"function":"old"}],"functions":["old"],"leaf":"old","depth":1}`
	if st, body, err := opensearch.Raw(ctx, e.OS, "PUT", "/"+e.Names.Stacks()+"/_doc/legacy?refresh=true", []byte(legacy)); err != nil || st/100 != 2 {
		t.Fatalf("legacy stack: %d %.300s %v", st, body, err)
	}
	ret := &indexer.Retention{Client: e.OS, Names: e.Names, Days: 7, StacksDays: 30, Now: func() time.Time { return day2.AddDate(0, 0, 30) }}
	if deleted, err := ret.PruneStacks(ctx); err != nil || deleted != 0 {
		t.Fatalf("30 days after their last use: %d deleted, %v; want none yet", deleted, err)
	}
	ret.Now = func() time.Time { return day2.AddDate(0, 0, 31) }
	if deleted, err := ret.PruneStacks(ctx); err != nil || deleted != int64(n) {
		t.Fatalf("31 days after: %d deleted, %v; want the %d stacks", deleted, err, n)
	}
	if got := lastSeen(); len(got) != 1 || got["1970-01-01"] != 1 {
		t.Fatalf("left %v, want only the legacy stack (no last_seen)", got)
	}
}
