package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/replay"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

type symbolizer struct {
	metrics *Metrics
	reg     *prometheus.Registry
	done    chan error
	stop    func()
}

// start runs the symbolizer in-process the way main wires it.
func start(t *testing.T, brokers []string, topics record.Topics, group string, sources ...source.Source) *symbolizer {
	t.Helper()
	return startWith(t, startOpts{debuginfoWait: 30 * time.Second}, brokers, topics, group, sources...)
}

type startOpts struct {
	debuginfoWait time.Duration // 0: no wait on a miss
	infoOpts      []kgo.Opt     // more options of the debuginfo follower's client
}

func startWith(t *testing.T, o startOpts, brokers []string, topics record.Topics, group string, sources ...source.Source) *symbolizer {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var (
		chain *source.Chain
		f     *source.Follower
	)
	var wait func(context.Context, time.Time) bool
	if o.debuginfoWait > 0 {
		wait = func(ctx context.Context, since time.Time) bool {
			ctx, cancel := context.WithTimeout(ctx, o.debuginfoWait)
			defer cancel()
			return f.WaitEnd(ctx, since) == nil
		}
	}
	store := source.NewTopic(64<<20, func(id string) { chain.Forget(id) })
	chain = source.NewChain(source.Options{MissTTL: time.Minute, Log: log, Metrics: m.ChainMetrics(), WaitDebuginfo: wait},
		append([]source.Source{store}, sources...)...)

	infoCl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, DebuginfoOpts(topics.Debuginfo)...), o.infoOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	f = &source.Follower{Client: infoCl, Admin: kadm.NewClient(admCl), Topic: topics.Debuginfo, Store: store, Log: log,
		OnApply: m.Debuginfo.WithLabelValues("applied").Inc, OnBad: m.Debuginfo.WithLabelValues("bad").Inc, OnReject: m.Debuginfo.WithLabelValues("rejected").Inc}
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{kgo.SeedBrokers(brokers...)},
		SessionOpts(group, topics.ProfilesRaw, testenv.Name(t, "txn-"), 0, kgo.Lz4Compression())...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{
		Session:        sess,
		Processor:      &Processor{Symbolizer: &symbolize.Symbolizer{Tables: chain, Budget: 2 * time.Minute}, Topics: topics, MaxOutputBytes: 999000, Log: log, OnPanic: m.Panics.Inc},
		Metrics:        m,
		Log:            log,
		MaxPollRecords: 7,
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &symbolizer{metrics: m, reg: reg, done: make(chan error, 1)}
	// As in main's run group: a follower that stops ends the instance
	// with its error. Dropping that error would leave the session in the
	// group, holding partitions that nobody polls.
	followerDone := make(chan error, 1)
	go func() { followerDone <- f.Run(ctx) }()
	go func() {
		select {
		case <-f.CaughtUp():
		case err := <-followerDone:
			if err != nil {
				log.Error("debuginfo follower stopped", "err", err)
				s.done <- fmt.Errorf("debuginfo follower: %w", err)
				return
			}
			s.done <- nil
			return
		case <-ctx.Done():
			s.done <- nil
			return
		}
		s.done <- r.Run(ctx)
	}()
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-s.done; err != nil {
			t.Errorf("runner: %v", err)
		}
		sess.Close()
		chain.Close()
		infoCl.Close()
		admCl.Close()
	}
	t.Cleanup(s.stop)
	return s
}

// TestSymbolizeEveryWay runs raw profiles whose binaries are known to each
// source (debuginfo topic, debug dir, Debian's debuginfod) plus garbage
// through the real broker, and checks the committed output.
func TestSymbolizeEveryWay(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	url := testbin.Debuginfod(t, corpus.Served, corpus.C.BuildID, corpus.Go.BuildID)
	topics, cl := ktest.Topics(t, brokers, 3)
	ctx := context.Background()

	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const n = 40
	meta := record.Meta{Type: record.ProfileCPU, Host: "host-a", AgentVersion: "test"}
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		v, err := record.EncodeProfile(corpus.Profile(t, i))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte("host-" + strconv.Itoa(i%5)), Value: v, Headers: meta.Headers()})
	}
	bomb := pproftest.Gzip(make([]byte, record.MaxProfileBytes+1024))
	badVersion := meta.Headers()
	badVersion[0].Value = []byte("99")
	garbage := map[string]*kgo.Record{
		"not_gzip":       {Value: []byte("hello, not a profile"), Headers: meta.Headers()},
		"not_pprof":      {Value: pproftest.Gzip([]byte("\xff\xff\xff\xff garbage")), Headers: meta.Headers()},
		"schema_version": {Value: recs[0].Value, Headers: badVersion},
		"missing_header": {Value: recs[0].Value},
		"too_large":      {Value: bomb, Headers: meta.Headers()},
	}
	for reason, r := range garbage {
		r.Topic, r.Key = topics.ProfilesRaw, []byte("bad-"+reason)
		// Interleaved with good records, on the same partitions.
		recs = append(recs[:len(recs)/2], append([]*kgo.Record{r}, recs[len(recs)/2:]...)...)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	s := start(t, brokers, topics, testenv.Name(t, "grp-"), source.Dirs{Dirs: []string{corpus.DebugDir}}, source.NewDebuginfod([]string{url}, 30*time.Second))

	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, n, 2*time.Minute, 3*time.Second)
	if len(out) != n {
		t.Fatalf("symbolized: %d records, want %d", len(out), n)
	}
	seen := map[string]bool{}
	want := corpus.Want()
	for _, r := range out {
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seq := p.Sample[0].Label["seq"][0]
		if seen[seq] {
			t.Fatalf("profile %s twice", seq)
		}
		seen[seq] = true
		if got := testbin.Names(p); !reflect.DeepEqual(got, want) {
			t.Fatalf("profile %s symbolized as\n%q\nwant\n%q", seq, got, want)
		}
		if want := "host-" + strconv.Itoa(atoi(t, seq)%5); string(r.Key) != want {
			t.Fatalf("key %q, want %q", r.Key, want)
		}
		if m, err := record.ParseMeta(r.Headers); err != nil || m.Host != "host-a" {
			t.Fatalf("headers not kept: %v %+v", err, m)
		}
	}
	// File and line made it too, from each source that has them.
	p, _ := record.DecodeProfile(out[0].Value)
	for i, wantFile := range []string{"cprog.c", "main.go", "cxxprog.cc"} {
		l := p.Sample[i].Location[0].Line[0]
		if !strings.HasSuffix(l.Function.Filename, wantFile) || l.Line == 0 {
			t.Errorf("sample %d: %s at %s:%d, want a line in %s", i, l.Function.Name, l.Function.Filename, l.Line, wantFile)
		}
	}

	wantWhy := map[string]string{
		"not_gzip": "not gzip", "not_pprof": "not a pprof profile", "schema_version": `unknown schema version: "99"`,
		"missing_header": "missing header " + record.HeaderSchemaVersion, "too_large": "too large",
	}
	dlq := ktest.Consume(t, brokers, topics.DLQ, len(garbage), time.Minute, time.Second)
	if len(dlq) != len(garbage) {
		t.Fatalf("dlq: %d records, want %d", len(dlq), len(garbage))
	}
	for _, r := range dlq {
		reason := strings.TrimPrefix(string(r.Key), "bad-")
		g := garbage[reason]
		why := record.HeaderValue(r.Headers, record.HeaderDLQReason)
		if !strings.Contains(why, wantWhy[reason]) || !bytes.Equal(r.Value, g.Value) ||
			record.HeaderValue(r.Headers, record.HeaderDLQTopic) != topics.ProfilesRaw ||
			record.HeaderValue(r.Headers, record.HeaderDLQOffset) == "" {
			t.Fatalf("dlq record for %s: reason %q headers %v", reason, why, r.Headers)
		}
		t.Logf("dlq %s: %s", reason, why)
	}
	s.stop()
	for _, src := range []string{"topic", "local", "debuginfod"} {
		if v := testutil.ToFloat64(s.metrics.Frames.WithLabelValues(src)); v == 0 {
			t.Errorf("no frames counted for source %s", src)
		}
	}
	if v := testutil.ToFloat64(s.metrics.Frames.WithLabelValues(symbolize.SourceUnresolved)); v != 0 {
		t.Errorf("%v unresolved frames", v)
	}
	for reason := range garbage {
		if v := testutil.ToFloat64(s.metrics.DLQ.WithLabelValues(reason)); v != 1 {
			t.Errorf("dlq metric %s = %v, want 1", reason, v)
		}
	}
	if hit := testutil.ToFloat64(s.metrics.Cache.WithLabelValues("binary", "hit")); hit < n {
		t.Errorf("binary cache hits %v: tables not cached", hit)
	}
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRebalanceTwoInstances runs two instances on one group while profiles
// flow, stops one mid-stream (its partitions move) and checks the output
// holds every profile exactly once.
func TestRebalanceTwoInstances(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, cl := ktest.Topics(t, brokers, 4)
	group := testenv.Name(t, "grp-")
	dirs := source.Dirs{Dirs: []string{corpus.AllDir}}
	a := start(t, brokers, topics, group, dirs)
	b := start(t, brokers, topics, group, dirs)

	const n = 200
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	go func() {
		for i := 0; i < n; i++ {
			v, _ := record.EncodeProfile(corpus.Profile(t, i))
			cl.Produce(context.Background(), &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte(fmt.Sprint("host-", i%16)), Value: v, Headers: meta.Headers()}, nil)
			if i == n/2 {
				a.stop() // leaves the group: b takes every partition
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, n, 3*time.Minute, 5*time.Second)
	seen := map[string]int{}
	for _, r := range out {
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[p.Sample[0].Label["seq"][0]]++
	}
	for i := 0; i < n; i++ {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("profile %d: %d copies", i, c)
		}
	}
	if len(out) != n {
		t.Fatalf("%d records, want %d", len(out), n)
	}
	b.stop()
	ca := testutil.ToFloat64(a.metrics.Records.WithLabelValues("symbolized"))
	cb := testutil.ToFloat64(b.metrics.Records.WithLabelValues("symbolized"))
	t.Logf("instance a committed %v, b %v", ca, cb)
	if ca+cb != n {
		t.Errorf("committed %v + %v, want %d", ca, cb, n)
	}
}

// TestReplayResymbolizes symbolizes profiles of a stripped binary whose debug
// info is nowhere yet (frames come out as binary+0xoffset), publishes the
// debug info, moves the group back with pkg/replay, and checks that the
// replayed output is readable.
func TestReplayResymbolizes(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, cl := ktest.Topics(t, brokers, 2)
	group := testenv.Name(t, "grp-")
	ctx := context.Background()

	const n = 10
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	before := time.Now().Add(-time.Minute)
	for i := 0; i < n; i++ {
		v, _ := record.EncodeProfile(corpus.Profile(t, i))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte(fmt.Sprint("host-", i)), Value: v, Headers: meta.Headers()}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Only the C++ binary has debug info at first.
	s := start(t, brokers, topics, group, source.Dirs{Dirs: []string{corpus.DebugDir}})
	first := ktest.Consume(t, brokers, topics.ProfilesSymbolized, n, time.Minute, 0)
	s.stop()
	if len(first) != n {
		t.Fatalf("first pass: %d records, want %d", len(first), n)
	}
	p, _ := record.DecodeProfile(first[0].Value)
	if got := testbin.Names(p)[3]; len(got) != 2 || !strings.HasPrefix(got[0], "ctopic+0x") {
		t.Fatalf("without debug info the topic binary's frames are %q, want ctopic+0x...", got)
	}

	// The agent publishes the binary's symbols; an operator replays.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	sum, err := replay.Run(ctx, cl, kadm.NewClient(cl), replay.Options{Group: group, Topic: topics.ProfilesRaw, From: before}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", progress.String())
	if sum.Records != n {
		t.Fatalf("replay covers %d records, want %d", sum.Records, n)
	}
	s = start(t, brokers, topics, group, source.Dirs{Dirs: []string{corpus.DebugDir}})
	all := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 2*n, time.Minute, 2*time.Second)
	s.stop()
	if len(all) != 2*n {
		t.Fatalf("after replay: %d records, want %d", len(all), 2*n)
	}
	// Per input, the later of its two outputs is the replayed one.
	type out struct {
		offset int64
		names  [][]string
	}
	latest := map[string]out{}
	for _, r := range all {
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seq := p.Sample[0].Label["seq"][0]
		if o, ok := latest[seq]; !ok || r.Offset > o.offset {
			latest[seq] = out{r.Offset, testbin.Names(p)}
		}
	}
	if len(latest) != n {
		t.Fatalf("%d distinct profiles, want %d", len(latest), n)
	}
	for seq, o := range latest {
		// The C and Go binaries still have no debug info in this test.
		if want := corpus.Want(); !reflect.DeepEqual(o.names[2:], want[2:]) || !strings.HasPrefix(o.names[0][0], "cprog+0x") {
			t.Fatalf("replayed profile %s: %q, want %q", seq, o.names, want)
		}
	}
}

// TestDebuginfoArrivesWhileRunning checks that the follower keeps reading the
// debuginfo topic after start-up, and that a new value replaces the cached
// miss of its build ID at once (not after the miss TTL of a minute).
func TestDebuginfoArrivesWhileRunning(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, cl := ktest.Topics(t, brokers, 1)
	ctx := context.Background()
	s := start(t, brokers, topics, testenv.Name(t, "grp-"))
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	produce := func(seq int) {
		v, _ := record.EncodeProfile(corpus.Profile(t, seq))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.ProfilesRaw, Value: v, Headers: meta.Headers()}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	names := func(r *kgo.Record) []string {
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		return testbin.Names(p)[3] // the sample in the topic binary
	}

	produce(0)
	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 1, time.Minute, 0)
	if len(out) != 1 || !strings.HasPrefix(names(out[0])[0], "ctopic+0x") {
		t.Fatalf("before the debuginfo: %d records, %v", len(out), out)
	}

	// Bad values on the topic are skipped and counted, not fatal.
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Topic: topics.Debuginfo, Key: []byte("0bad"), Value: []byte("not debuginfo")},
		&kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(s.metrics.Debuginfo.WithLabelValues("applied")) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not apply the new debuginfo value")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if bad := testutil.ToFloat64(s.metrics.Debuginfo.WithLabelValues("bad")); bad != 1 {
		t.Fatalf("bad debuginfo values counted: %v, want 1", bad)
	}
	produce(1)
	out = ktest.Consume(t, brokers, topics.ProfilesSymbolized, 2, time.Minute, 0)
	if len(out) != 2 {
		t.Fatalf("%d records, want 2", len(out))
	}
	if got := names(out[1]); !reflect.DeepEqual(got, []string{"leaf_work", "middle"}) {
		t.Fatalf("after the debuginfo arrived: %q", got)
	}
}

// TestDebuginfoWrittenInTransaction: when the debuginfo topic ends with a
// transaction marker, its last offset never shows as a record; start-up
// must still finish reading the topic and use what it holds.
func TestDebuginfoWrittenInTransaction(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, cl := ktest.Topics(t, brokers, 1)
	ctx := context.Background()
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(testenv.Name(t, "txn-")))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	v, _ := record.EncodeProfile(corpus.Profile(t, 0))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.ProfilesRaw, Value: v, Headers: meta.Headers()}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	start(t, brokers, topics, testenv.Name(t, "grp-"))
	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 1, time.Minute, 0)
	if len(out) != 1 {
		t.Fatalf("%d records", len(out))
	}
	p, err := record.DecodeProfile(out[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if got := testbin.Names(p)[3]; !reflect.DeepEqual(got, []string{"leaf_work", "middle"}) {
		t.Fatalf("debuginfo from a transaction not used: %q", got)
	}
}
