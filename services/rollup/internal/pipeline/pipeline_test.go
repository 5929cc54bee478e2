package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// env is one test's topics, group and index prefix on the shared services.
type env struct {
	t            testing.TB
	brokers      []string
	osURL        string
	topics       record.Topics
	group        string
	names        indices.Names
	os           *opensearchapi.Client
	adm          *kadm.Client
	prod         *kgo.Client
	window       aggregate.Config
	idle         time.Duration // IdleFlush of the instances
	flushTimeout time.Duration // FlushTimeout of the instances; 0 means 20s
	// wrap, when set, wraps the instances' writer (to slow it down or
	// fail it).
	wrap func(Writer) Writer
	// snapshotEvery, when set, gives the instances Snapshots in the
	// group's state topic.
	snapshotEvery time.Duration
}

func newEnv(t testing.TB, partitions int32) *env {
	t.Helper()
	e := &env{t: t, brokers: testenv.KafkaBrokers(t), osURL: testenv.OpenSearchURL(t)}
	ctx := context.Background()
	e.topics = record.TopicsFor(testenv.Name(t, "t-") + ".")
	e.group = testenv.Name(t, "g-")
	e.names = indices.Names{Prefix: testenv.Name(t, "r-") + "-"}
	e.window = aggregate.Config{AllowedLateness: time.Minute, Retention: time.Minute, MaxClockSkew: time.Hour, Names: e.names, Now: time.Now}

	prod, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	e.prod = prod
	e.adm = kadm.NewClient(prod)
	t.Cleanup(prod.Close)
	if _, err := kafka.EnsureTopics(ctx, e.adm, kafka.Specs(e.topics, partitions, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.adm.DeleteGroups(context.Background(), e.group)
		e.adm.DeleteTopics(context.Background(), e.topics.All()...)
	})

	e.os = e.osClient(e.osURL)
	if _, err := opensearch.ApplyTemplates(ctx, e.os, e.names.Prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), e.os, e.names.Prefix) })
	return e
}

// stateTopic is the test's state topic (Snapshots).
func (e *env) stateTopic() string { return record.RollupStateTopic(e.topics.ProfilesRaw+".", e.group) }

func (e *env) osClient(url string) *opensearchapi.Client {
	e.t.Helper()
	cl, err := opensearch.NewClient(context.Background(), opensearch.Config{URLs: []string{url}, Timeout: 10 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// produce sends profiles keyed by host and waits for the broker's acks.
func (e *env) produce(typ record.ProfileType, host string, profs ...*profile.Profile) {
	e.t.Helper()
	recs := make([]*kgo.Record, 0, len(profs))
	for _, p := range profs {
		v, err := record.EncodeProfile(p)
		if err != nil {
			e.t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: e.topics.ProfilesSymbolized, Key: []byte(host), Value: v,
			Headers: record.Meta{Type: typ, Host: host, AgentVersion: "test"}.Headers()})
	}
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// atEnd reports whether in has handled every record of every partition.
func (e *env) atEnd(in *instance) func() bool {
	return func() bool {
		ends, err := e.adm.ListEndOffsets(context.Background(), e.topics.ProfilesSymbolized)
		if err != nil {
			return false
		}
		in.r.mu.Lock()
		defer in.r.mu.Unlock()
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if p := in.r.parts[o.Partition]; p == nil || p.Next() < o.Offset {
				done = false
			}
		})
		return done
	}
}

// produceFleet sends hosts' CPU profiles every 20 s from interval from to
// to (t0 + 20 s each, a second apart by host), recorded in x, and returns
// how many.
func (e *env) produceFleet(x expected, hosts []string, from, to int) int {
	e.t.Helper()
	for k := from; k < to; k++ {
		for h, host := range hosts {
			at := t0.Add(time.Duration(k)*20*time.Second + time.Duration(h)*time.Second)
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, at, int64(10*k+h), 3))
		}
	}
	return (to - from) * len(hosts)
}

// versions are the _version of every rollup document of a window that
// starts before before (hours and the compactor's documents left out),
// by ID.
func (e *env) versions(before time.Time) map[string]int {
	e.t.Helper()
	body := e.search(fmt.Sprintf(`{"version":true,"_source":false,"query":{"bool":{"filter":[{"range":{"@timestamp":{"lt":%q}}},{"terms":{"resolution":[%q,%q]}}]}}}`,
		before.Format(time.RFC3339), indices.ResolutionMinute, indices.ResolutionTenMinutes))
	var resp struct {
		Hits struct {
			Hits []struct {
				ID      string `json:"_id"`
				Version int    `json:"_version"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, h := range resp.Hits.Hits {
		out[h.ID] = h.Version
	}
	return out
}

// instance is one running rollup consumer.
type instance struct {
	r    *Rollup
	cl   *kgo.Client
	stop context.CancelFunc
	done chan error
	once sync.Once
}

// start runs a rollup consumer writing to osURL (the node, or a proxy).
func (e *env) start(osURL string) *instance {
	e.t.Helper()
	w := bulk.New(e.osClient(osURL), bulk.Options{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	log := slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	flushTimeout := e.flushTimeout
	if flushTimeout == 0 {
		flushTimeout = 20 * time.Second
	}
	var wr Writer = w
	if e.wrap != nil {
		wr = e.wrap(w)
	}
	var snaps *Snapshots
	if e.snapshotEvery > 0 {
		kc := kafka.Config{Brokers: e.brokers, DialTimeout: 10 * time.Second}
		snaps = &Snapshots{Topic: e.stateTopic(), Every: e.snapshotEvery,
			NewClient: func(opts ...kgo.Opt) (*kgo.Client, error) { return kafka.NewClient(context.Background(), kc, opts...) }}
		if err := snaps.EnsureTopic(context.Background(), e.adm, e.topics.ProfilesSymbolized); err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() {
			snaps.Close()
			e.adm.DeleteTopics(context.Background(), snaps.Topic)
		})
	}
	r := New(Config{Topics: e.topics, Group: e.group, Window: e.window, FlushTimeout: flushTimeout, IdleFlush: e.idle, Snapshots: snaps}, wr, log, prometheus.NewRegistry())
	cl, err := kafka.NewClient(context.Background(), kafka.Config{Brokers: e.brokers, DialTimeout: 10 * time.Second}, r.ClientOpts()...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	in := &instance{r: r, cl: cl, stop: stop, done: make(chan error, 1)}
	go func() { in.done <- r.Run(ctx, cl) }()
	e.t.Cleanup(func() { in.close(e.t) })
	return in
}

// close stops the consumer gracefully (final flush and commit) and leaves
// the group.
func (in *instance) close(t testing.TB) {
	t.Helper()
	in.once.Do(func() { in.shutdown(t) })
}

func (in *instance) shutdown(t testing.TB) {
	t.Helper()
	in.stop()
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("run did not stop")
	}
	in.cl.Close()
}

func (in *instance) count(outcome string) int {
	return int(testutil.ToFloat64(in.r.m.Records.WithLabelValues(outcome)))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// search refreshes the rollups indices and returns the answer to the
// search q (up to 10,000 hits).
func (e *env) search(q string) []byte {
	e.t.Helper()
	ctx := context.Background()
	pattern := e.names.RollupsPattern()
	// A rollups index created moments ago answers 503 until its shards
	// start, which takes seconds on a loaded machine.
	var status int
	var body []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if status, body, err = opensearch.Raw(ctx, e.os, http.MethodPost, "/"+pattern+"/_refresh", nil); err == nil && status == http.StatusOK {
			status, body, err = opensearch.Raw(ctx, e.os, http.MethodPost, "/"+pattern+"/_search?size=10000", []byte(q))
		}
		if (err == nil && status == http.StatusOK) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || status != http.StatusOK {
		e.t.Fatalf("refresh and search: %d %s %v", status, body, err)
	}
	return body
}

// docs returns every rollup document stored, by _id.
func (e *env) docs() map[string]indices.RollupDoc {
	e.t.Helper()
	// The stacks are not in _source (rollups schema 4): read from doc values.
	body := e.search(`{"query":{"match_all":{}},"docvalue_fields":["stack_id","stack_values"]}`)
	var resp struct {
		Hits struct {
			Hits []struct {
				ID     string                 `json:"_id"`
				Index  string                 `json:"_index"`
				Source json.RawMessage        `json:"_source"`
				Fields indices.StackDocValues `json:"fields"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]indices.RollupDoc{}
	for _, h := range resp.Hits.Hits {
		var d indices.RollupDoc
		src, err := indices.WithStackDocValues(h.Source, h.Fields)
		if err == nil {
			err = json.Unmarshal(src, &d)
		}
		if err != nil {
			e.t.Fatalf("doc %s: %v", h.ID, err)
		}
		if want := indices.RollupID(&d); want != h.ID {
			e.t.Fatalf("doc %s has _id %s, want %s", h.Index, h.ID, want)
		}
		if want := e.names.Rollups(d.Timestamp); want != h.Index {
			e.t.Fatalf("doc %s in index %s, want %s", h.ID, h.Index, want)
		}
		out[h.ID] = d
	}
	return out
}

// committed returns the group's committed offsets and metadata.
func (e *env) committed() map[int32]kadm.OffsetResponse {
	e.t.Helper()
	resps, err := e.adm.FetchOffsets(context.Background(), e.group)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]kadm.OffsetResponse{}
	for p, o := range resps[e.topics.ProfilesSymbolized] {
		out[p] = o
	}
	return out
}

// dlq reads n records of the DLQ topic.
func (e *env) dlq(n int) []*kgo.Record {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.topics.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			ends, err := e.adm.ListEndOffsets(context.Background(), e.topics.DLQ)
			e.t.Fatalf("read %d of %d dlq records (end offsets %v %v)", len(out), n, ends, err)
		}
		f.EachError(func(topic string, p int32, err error) { e.t.Logf("dlq fetch %s/%d: %v", topic, p, err) })
		out = append(out, f.Records()...)
	}
	return out
}

// key names a document for comparisons.
func key(d indices.RollupDoc) string {
	return fmt.Sprintf("%s %s %s %s %s %s f=%s s=%s p=%d", d.Resolution, d.Timestamp.UTC().Format("15:04"), d.Kind, d.Type, d.Service, d.Host, d.Function, strings.Join(d.StackIDs, ","), d.Partition)
}

// byKey indexes docs by key, a stacks document as one stack document per
// stack.
func byKey(docs map[string]indices.RollupDoc) map[string]indices.RollupDoc {
	out := make(map[string]indices.RollupDoc, len(docs))
	for _, d := range docs {
		if d.Kind != indices.KindStacks {
			out[key(d)] = d
			continue
		}
		stacks, err := d.PerStack()
		if err != nil {
			panic(err)
		}
		for _, st := range stacks {
			out[key(st)] = st
		}
	}
	return out
}

var t0 = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func stackID(fns ...string) string {
	frames := make([]indices.Frame, len(fns))
	for i, f := range fns {
		frames[i] = indices.Frame{Function: f}
	}
	return indices.StackID(frames)
}

// expected accumulates what the rollups must hold, computed straight from
// the generated input.
type expected map[string]*indices.RollupDoc

func (x expected) at(res string, t time.Time, kind, typ, service, host, function, stack string) *indices.RollupDoc {
	d := indices.RollupDoc{Timestamp: t.Truncate(indices.WindowSize(res)), Resolution: res, Kind: kind, Type: typ, Service: service, Host: host, Function: function}
	if stack != "" {
		d.StackIDs = []string{stack}
	}
	k := key(d)
	if x[k] == nil {
		x[k] = &d
	}
	return x[k]
}

// cpuProfile: checkout burns a in leaf<-mid<-main, api b in rec<-rec<-main
// (recursion: rec counts once in total).
func (x expected) cpuProfile(host string, at time.Time, a, b int64) *profile.Profile {
	for _, res := range []string{indices.ResolutionMinute, indices.ResolutionTenMinutes, indices.ResolutionHour} {
		s := x.at(res, at, indices.KindService, "cpu", "checkout", host, "", "")
		s.Value += a
		s.StackValue += a
		s.Samples += 2
		s = x.at(res, at, indices.KindService, "cpu", "api", host, "", "")
		s.Value += b
		s.StackValue += b
		s.Samples++
		if res != indices.ResolutionHour {
			// Part-hour partition trees; no stacks per host at 10 minutes.
			x.partitionTree(res, at, a, "main", "mid", "leaf")
			x.partitionTree(res, at, b, "main", "rec", "rec")
		}
		if res == indices.ResolutionTenMinutes {
			continue
		}
		if res == indices.ResolutionHour {
			// Function documents are per hour only.
			x.at(res, at, indices.KindFunction, "cpu", "checkout", host, "leaf", "").Self += a
			for _, f := range []string{"leaf", "mid", "main"} {
				x.at(res, at, indices.KindFunction, "cpu", "checkout", host, f, "").Total += a
			}
			x.at(res, at, indices.KindFunction, "cpu", "api", host, "rec", "").Self += b
			x.at(res, at, indices.KindFunction, "cpu", "api", host, "rec", "").Total += b
			x.at(res, at, indices.KindFunction, "cpu", "api", host, "main", "").Total += b
		}
		st := x.at(res, at, indices.KindStack, "cpu", "checkout", host, "", stackID("leaf", "mid", "main"))
		st.Value += a
		st = x.at(res, at, indices.KindStack, "cpu", "api", host, "", stackID("rec", "rec", "main"))
		st.Value += b
	}
	// The hour's trees: the same stacks merged by name, root first.
	x.tree(at, "checkout", host, a, "main", "mid", "leaf")
	x.tree(at, "api", host, b, "main", "rec", "rec")
	return pproftest.NewCPU(at, 10*time.Second).
		Sample(map[string]string{record.LabelService: "checkout", record.LabelPID: "10"}, []int64{2, a}, "leaf", "mid", "main").
		Sample(map[string]string{record.LabelService: "api", record.LabelPID: "20"}, []int64{1, b}, "rec", "rec", "main").
		Profile()
}

// partitionOnly marks an expected host tree that only the partition tree
// holds (its own documents were rejected).
const partitionOnly = "test-partition-only"

// expectedTrees builds the tree documents of expected, by document.
var expectedTrees = map[*indices.RollupDoc]*indices.TreeBuilder{}

func (x expected) tree(at time.Time, service, host string, v int64, path ...string) {
	d := x.at(indices.ResolutionHour, at, indices.KindTree, "cpu", service, host, "", "")
	b := expectedTrees[d]
	if b == nil {
		b = &indices.TreeBuilder{}
		expectedTrees[d] = b
	}
	frames := make([]indices.TreeFrame, len(path))
	for i, f := range path {
		frames[i] = indices.TreeFrame{Name: f}
	}
	b.Add(frames, v)
	d.Value += v
}

// partitionTree adds a stack to the expected partition tree of a part-hour
// window (summed over the partitions by compare).
func (x expected) partitionTree(res string, at time.Time, v int64, path ...string) {
	d := x.at(res, at, indices.KindPartitionTree, "cpu", "", "", "", "")
	b := expectedTrees[d]
	if b == nil {
		b = &indices.TreeBuilder{}
		expectedTrees[d] = b
	}
	frames := make([]indices.TreeFrame, len(path))
	for i, f := range path {
		frames[i] = indices.TreeFrame{Name: f}
	}
	b.Add(frames, v)
	d.Value += v
}

// finish derives cores from values (the same division the rollup does) and
// encodes the trees.
func (x expected) finish() map[string]indices.RollupDoc {
	out := map[string]indices.RollupDoc{}
	for k, d := range x {
		if b := expectedTrees[d]; b != nil {
			d.Tree = b.Encode()
		}
		if d.Kind == indices.KindService && d.Type == "cpu" {
			d.Cores = float64(d.Value) / float64(indices.WindowSize(d.Resolution).Nanoseconds())
		}
		out[k] = *d
	}
	return out
}

func compare(t *testing.T, got map[string]indices.RollupDoc, want map[string]indices.RollupDoc) {
	t.Helper()
	// Service and partition trees are one per partition: their merge must
	// be the merge of the service's (every service's) host trees, however
	// the hosts were partitioned.
	want = maps.Clone(want)
	checkPartitionHeads(t, got)
	checkFunctionTables(t, got)
	serviceTrees := func(docs map[string]indices.RollupDoc, kinds ...string) map[string]map[string][2]int64 {
		out := map[string]map[string][2]int64{}
		for k, d := range docs {
			if !slices.Contains(kinds, d.Kind) {
				continue
			}
			if d.Kind == indices.KindServiceTree || d.Kind == indices.KindPartitionTree || d.Kind == partitionOnly {
				delete(docs, k)
			}
			key := d.Resolution + "/" + d.Timestamp.UTC().Format(time.RFC3339) + "/" + d.Type + "/"
			if kinds[0] != indices.KindPartitionTree {
				key += d.Service
			}
			if out[key] == nil {
				out[key] = map[string][2]int64{}
			}
			for p, v := range treePaths(t, d.Tree) {
				o := out[key][p]
				out[key][p] = [2]int64{o[0] + v[0], o[1] + v[1]}
			}
		}
		return out
	}
	wantPT := serviceTrees(want, indices.KindPartitionTree, indices.KindTree, partitionOnly)
	if gotPT := serviceTrees(got, indices.KindPartitionTree); len(gotPT) == 0 || !reflect.DeepEqual(gotPT, wantPT) {
		t.Errorf("partition trees\n got %v\nwant %v", gotPT, wantPT)
	}
	wantST := serviceTrees(want, indices.KindTree)
	if gotST := serviceTrees(got, indices.KindServiceTree); !reflect.DeepEqual(gotST, wantST) {
		t.Errorf("service trees\n got %v\nwant %v", gotST, wantST)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		g.Timestamp, w.Timestamp = g.Timestamp.UTC(), w.Timestamp.UTC()
		if g.Kind == indices.KindTree {
			// Same tree, whatever the order its stacks were added in.
			if gp, wp := treePaths(t, g.Tree), treePaths(t, w.Tree); !reflect.DeepEqual(gp, wp) {
				t.Errorf("%s: tree\n got %v\nwant %v", k, gp, wp)
			}
			g.Tree, w.Tree = nil, nil
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s", k)
		}
	}
}

func TestRollupsExactAndReplay(t *testing.T) {
	// Flushes written in many chunks, each marked stored once written.
	defer func(n int) { flushChunkBytes = n }(flushChunkBytes)
	flushChunkBytes = 4 << 10
	e := newEnv(t, 3)
	x := expected{}
	n := 0
	hosts := []string{"web-1", "web-2", "web-3", "web-4"}
	// Five minutes, a profile of each type every 20 s per host, hosts a
	// second apart, produced in time order as agents would.
	for k := range 15 {
		for h, host := range hosts {
			at := t0.Add(time.Duration(k)*20*time.Second + time.Duration(h)*time.Second)
			e.produce(record.ProfileCPU, host, x.cpuProfile(host, at, int64(1000*(h+1)+k), int64(7+k)))
			e.produce(record.ProfileMemory, host, pproftest.NewMemory(at, 10*time.Second).
				Sample(map[string]string{record.LabelService: "db", record.LabelPID: "1"}, []int64{int64(100 * (k + 1))}).
				Sample(map[string]string{record.LabelService: "db", record.LabelPID: "2"}, []int64{int64(h)}).
				Profile())
			n += 2
		}
	}
	for h, host := range hosts {
		// Memory: three profiles per minute, each summing both processes.
		for m := range 5 {
			for _, res := range []string{indices.ResolutionMinute, indices.ResolutionTenMinutes, indices.ResolutionHour} {
				d := x.at(res, t0.Add(time.Duration(m)*time.Minute), indices.KindService, "memory", "db", host, "", "")
				var sum, peak int64
				ks := []int{3 * m, 3*m + 1, 3*m + 2}
				if res != indices.ResolutionMinute {
					ks = make([]int, 15)
					for i := range ks {
						ks[i] = i
					}
				}
				for _, k := range ks {
					v := int64(100*(k+1)) + int64(h)
					sum += v
					peak = max(peak, v)
				}
				d.MemAvg, d.MemMax, d.Samples = float64(sum)/float64(len(ks)), peak, int64(2*len(ks))
			}
		}
	}
	want := x.finish()

	in := e.start(e.osURL)
	waitFor(t, "all records folded in", 60*time.Second, func() bool { return in.count("added") == n })
	// Minutes 10:00 to 10:02 close on the watermark (10:04:41) before any
	// shutdown; the rest is written by the final flush.
	waitFor(t, "closed windows written", 60*time.Second, func() bool {
		_, ok := byKey(e.docs())[key(indices.RollupDoc{Resolution: "1m", Timestamp: t0.Add(2 * time.Minute), Kind: "service", Type: "cpu", Service: "checkout", Host: "web-4"})]
		return ok
	})
	in.close(t)
	first := e.docs()
	compare(t, byKey(first), want)
	if t.Failed() {
		t.FailNow()
	}
	// The hour window holds every record, so nothing may be committed past
	// the first offset of each partition.
	for p, o := range e.committed() {
		if o.Err != nil || o.At != 0 {
			t.Errorf("partition %d committed %d (%v), want 0: the 10:00 hour is still in memory", p, o.At, o.Err)
		}
	}

	// Replay: reset the group to the start and run again.
	e.replaySame(t, 3, n, first)
}

// replaySame resets the group to the start of every partition, runs an
// instance until it has folded n records again, and checks that it wrote
// the documents of first, byte for byte.
func (e *env) replaySame(t *testing.T, partitions int32, n int, first map[string]indices.RollupDoc) {
	t.Helper()
	reset := kadm.Offsets{}
	for p := range partitions {
		reset.Add(kadm.Offset{Topic: e.topics.ProfilesSymbolized, Partition: p, At: 0, LeaderEpoch: -1})
	}
	if err := e.adm.CommitAllOffsets(context.Background(), e.group, reset); err != nil {
		t.Fatalf("reset group: %v", err)
	}
	again := e.start(e.osURL)
	waitFor(t, "replay folded in", 60*time.Second, func() bool { return again.count("added") == n })
	again.close(t)
	second := e.docs()
	if len(second) != len(first) {
		t.Fatalf("replay changed the document count: %d, then %d", len(first), len(second))
	}
	for id, d := range first {
		if !reflect.DeepEqual(second[id], d) {
			t.Errorf("replay changed %s: %+v, then %+v", id, d, second[id])
		}
	}
}

func TestLateProfileRecomputesWithoutDoubleCounting(t *testing.T) {
	e := newEnv(t, 1)
	e.window.Retention = 5 * time.Minute
	x := expected{}
	checkout1m := key(indices.RollupDoc{Resolution: "1m", Timestamp: t0, Kind: "service", Type: "cpu", Service: "checkout", Host: "web-1"})
	n := 0
	var firstMinute int64
	for k := range 12 { // 10:00:10 to 10:03:50
		at := t0.Add(10*time.Second + time.Duration(k)*20*time.Second)
		a := int64(100 + k)
		if at.Before(t0.Add(time.Minute)) {
			firstMinute += a
		}
		e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", at, a, 1))
		n++
	}
	in := e.start(e.osURL)
	// The watermark (10:03:50) closed 10:00 (and 10:01) and wrote them.
	waitFor(t, "minute 10:00 written", 60*time.Second, func() bool { return byKey(e.docs())[checkout1m].Value == firstMinute })

	// Late, within allowed lateness plus retention: recomputed, not added twice.
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(40*time.Second), 5000, 1))
	// Written again once the watermark moves a minute
	// (aggregate.RewriteDelay): from 10:03:50 to 10:05.
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(5*time.Minute), 3, 1))
	n += 2
	waitFor(t, "minute 10:00 rewritten", 60*time.Second, func() bool { return byKey(e.docs())[checkout1m].Value == firstMinute+5000 })

	// Push the watermark past 10:00's retention, then a profile for 10:00:
	// too late, so it goes to the DLQ and changes nothing.
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(9*time.Minute), 1, 1))
	e.produce(record.ProfileCPU, "web-1", (expected{}).cpuProfile("web-1", t0.Add(20*time.Second), 777, 1))
	n += 2
	waitFor(t, "too-late profile in the DLQ", 60*time.Second, func() bool { return in.count("dlq") == 1 })
	in.close(t)
	want := x.finish()
	compare(t, byKey(e.docs()), want)
	d := e.dlq(1)[0]
	if reason := record.HeaderValue(d.Headers, record.HeaderDLQReason); !strings.HasPrefix(reason, "too late") {
		t.Fatalf("dlq reason %q", reason)
	}
	if off := record.HeaderValue(d.Headers, record.HeaderDLQOffset); off != fmt.Sprint(n-1) {
		t.Fatalf("dlq offset %s, want %d", off, n-1)
	}

	// A restart reads again from the commit (the 10:00 hour holds it) with
	// the checkpoint: same decisions, no double counting, no second DLQ
	// record.
	again := e.start(e.osURL)
	waitFor(t, "restart caught up", 60*time.Second, func() bool { return again.count("added")+again.count("skipped") == n })
	again.close(t)
	if got := again.count("dlq"); got != 0 {
		t.Errorf("restart sent %d records to the DLQ again", got)
	}
	compare(t, byKey(e.docs()), want)
}

func TestOpenSearchOutageCommitsNothingEarly(t *testing.T) {
	e := newEnv(t, 1)
	x := expected{}
	proxy := testenv.NewProxy(t, strings.TrimPrefix(e.osURL, "http://"))
	n := 0
	produce := func(from, to time.Duration) {
		for at := from; at < to; at += time.Minute {
			for h, host := range []string{"web-1", "web-2"} {
				e.produce(record.ProfileCPU, host, x.cpuProfile(host, t0.Add(at+time.Duration(h)*time.Second), int64(at/time.Minute)+1, int64(h)+1))
				n++
			}
		}
	}
	committedAt := func() int64 {
		o, ok := e.committed()[0]
		if !ok || o.Err != nil {
			return -1
		}
		return o.At
	}

	produce(0, 90*time.Minute) // 10:00 to 11:29
	in := e.start("http://" + proxy.Addr())
	// Hour 10 is written and evicted once the watermark passes 11:02.
	waitFor(t, "a commit past hour 10", 60*time.Second, func() bool { return committedAt() > 0 })
	waitFor(t, "first half folded in", 60*time.Second, func() bool { return in.count("added") == n })
	before := committedAt()
	o := e.committed()[0]
	if cp, ok := aggregate.ParseCheckpoint(o.Metadata); !ok || cp.Next < before {
		t.Fatalf("commit metadata %q is not a checkpoint", o.Metadata)
	}

	proxy.SetDown(true)
	produce(90*time.Minute, 180*time.Minute) // closes hours 11 and 12, which cannot be stored
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if got := committedAt(); got != before {
			t.Fatalf("committed %d while OpenSearch was unreachable (was %d)", got, before)
		}
	}
	proxy.SetDown(false)
	waitFor(t, "catch-up", 90*time.Second, func() bool { return in.count("added") == n && committedAt() > before })
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

func TestBadInputGoesToDLQ(t *testing.T) {
	e := newEnv(t, 1)
	x := expected{}
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0, 40, 2))
	// Not a profile, and no headers at all.
	bad := []*kgo.Record{
		{Topic: e.topics.ProfilesSymbolized, Key: []byte("web-1"), Value: []byte("not a profile"), Headers: record.Meta{Type: record.ProfileCPU, Host: "web-1"}.Headers()},
		{Topic: e.topics.ProfilesSymbolized, Key: []byte("web-1"), Value: []byte("x")},
	}
	if err := e.prod.ProduceSync(context.Background(), bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A service name over Lucene's 32766-byte term limit: every document of
	// that service breaks the mapping; the other service's are stored.
	huge := strings.Repeat("x", 33000)
	prof := (expected{}).cpuProfile("web-1", t0.Add(time.Second), 0, 0)
	prof.Sample = append(prof.Sample[:0], &profile.Sample{Location: prof.Sample[0].Location, Value: []int64{1, 9}, Label: map[string][]string{record.LabelService: {huge}}})
	e.produce(record.ProfileCPU, "web-1", prof)
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(2*time.Second), 60, 3))

	in := e.start(e.osURL)
	waitFor(t, "records read", 60*time.Second, func() bool { return in.count("added") == 3 && in.count("dlq") == 2 })
	in.close(t)
	// The partition tree has no service field: it is stored, with the huge
	// service's stack.
	for _, res := range []string{indices.ResolutionMinute, indices.ResolutionTenMinutes, indices.ResolutionHour} {
		huge9 := x.at(res, t0, partitionOnly, "cpu", huge, "web-1", "", "")
		huge9.Tree = func() []byte {
			var b indices.TreeBuilder
			b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "mid"}, {Name: "leaf"}}, 9)
			return b.Encode()
		}()
	}
	compare(t, byKey(e.docs()), x.finish())

	// 2 records + per resolution 1 service and 1 stack document (a
	// service document at 10 minutes), 3 function documents in the hour,
	// and the hour's tree and service tree.
	recs := e.dlq(2 + 2*2 + 1 + 3 + 2)
	reasons := map[string]int{}
	for _, r := range recs {
		reason := record.HeaderValue(r.Headers, record.HeaderDLQReason)
		switch {
		case strings.HasPrefix(reason, "decode profile"):
			reasons["decode"]++
		case strings.HasPrefix(reason, "parse headers"):
			reasons["headers"]++
		case strings.HasPrefix(reason, "opensearch rejected rollup document") && strings.Contains(reason, "HTTP 400"):
			reasons["rejected"]++
			if off := record.HeaderValue(r.Headers, record.HeaderDLQOffset); off != "3" {
				t.Errorf("rejected document points at offset %s, want 3 (the profile behind it)", off)
			}
			var d indices.RollupDoc
			if err := json.Unmarshal(r.Value, &d); err != nil || d.Service != huge {
				t.Errorf("rejected document value is not the document: %v", err)
			}
		default:
			t.Errorf("unexpected dlq reason %.200q", reason)
		}
		if svc := record.HeaderValue(r.Headers, record.HeaderDLQService); svc != ServiceName {
			t.Errorf("dlq service header %q", svc)
		}
	}
	if reasons["decode"] != 1 || reasons["headers"] != 1 || reasons["rejected"] != 10 {
		t.Fatalf("dlq reasons %v, want decode 1, headers 1, rejected 10", reasons)
	}
}

// TestInstancesShareAndHandOver runs two instances in one group: the second
// joins mid-stream (partitions move: the first flushes and commits what it
// revokes), then the first leaves (the second takes everything over from the
// commits and their checkpoints). The documents stay exact.
func TestInstancesShareAndHandOver(t *testing.T) {
	e := newEnv(t, 4)
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4", "web-5", "web-6"}
	n := 0
	produce := func(from, to int) { n += e.produceFleet(x, hosts, from, to) }
	produce(0, 30) // 10:00 to 10:09:40
	a := e.start(e.osURL)
	waitFor(t, "first instance caught up", 60*time.Second, func() bool { return a.count("added") == n })
	if !a.r.OwnsFirstPartition() {
		t.Fatal("the only instance does not own partition 0: no instance would run the lifecycle")
	}
	b := e.start(e.osURL)
	produce(30, 60) // to 10:19:40
	waitFor(t, "both caught up", 90*time.Second, func() bool {
		a.r.mu.Lock()
		parts := len(a.r.parts)
		a.r.mu.Unlock()
		return parts < 4 && b.count("added") > 0
	})
	// One instance at a time leads the fleet-wide passes.
	waitFor(t, "one of two instances owning partition 0", 30*time.Second, func() bool {
		return a.r.OwnsFirstPartition() != b.r.OwnsFirstPartition()
	})
	a.close(t)
	produce(60, 90) // to 10:29:40
	// b reads again what a had not committed, so it counts at least the
	// rest; wait until every partition is at its end.
	waitFor(t, "second instance at the end", 90*time.Second, e.atEnd(b))
	if !b.r.OwnsFirstPartition() {
		t.Error("the instance left alone does not own partition 0")
	}
	b.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestIdlePartitionIsWritten: a host goes quiet, so its partition's
// watermark stands still; its open windows are written anyway after the idle
// time, stay in memory (nothing committed past them), and are recomputed
// when records come back.
func TestIdlePartitionIsWritten(t *testing.T) {
	e := newEnv(t, 1)
	e.idle = time.Second
	// A Budget as the binary has: its stack cache's work is exported.
	e.window.Budget = &aggregate.Budget{MaxBytes: 256 << 20}
	x := expected{}
	minute := key(indices.RollupDoc{Resolution: "1m", Timestamp: t0, Kind: "service", Type: "cpu", Service: "checkout", Host: "web-1"})
	for k := range 3 {
		e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(time.Duration(k)*20*time.Second), 100, 1))
	}
	in := e.start(e.osURL)
	waitFor(t, "idle windows written", 60*time.Second, func() bool { return byKey(e.docs())[minute].Value == 300 })
	e.produce(record.ProfileCPU, "web-1", x.cpuProfile("web-1", t0.Add(50*time.Second), 11, 1))
	waitFor(t, "window recomputed", 60*time.Second, func() bool { return byKey(e.docs())[minute].Value == 311 })
	if o := e.committed()[0]; o.At != 0 {
		t.Fatalf("committed %d past windows still open", o.At)
	}
	waitFor(t, "the stack cache's builds exported", 30*time.Second, func() bool {
		return testutil.ToFloat64(in.r.m.cacheEvents.WithLabelValues("built")) > 0 && testutil.ToFloat64(in.r.m.cacheBytes) > 0
	})
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestHostFromKeyWithoutHeader: a record without a host header is the host
// of its key (record.Host), as the indexer attributes it, not host "".
func TestHostFromKeyWithoutHeader(t *testing.T) {
	e := newEnv(t, 1)
	e.idle = time.Second
	x := expected{}
	prof := x.cpuProfile("web-7", t0, 100, 1) // samples without a host label
	v, err := record.EncodeProfile(prof)
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: e.topics.ProfilesSymbolized, Key: []byte("web-7"), Value: v,
		Headers: record.Meta{Type: record.ProfileCPU, AgentVersion: "test"}.Headers()}
	if err := e.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	in := e.start(e.osURL)
	minute := key(indices.RollupDoc{Resolution: "1m", Timestamp: t0, Kind: "service", Type: "cpu", Service: "checkout", Host: "web-7"})
	waitFor(t, "windows written", 60*time.Second, func() bool { return byKey(e.docs())[minute].Value == 100 })
	in.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// treePaths decodes a tree into "root;...;leaf" -> [self, total].
func treePaths(t *testing.T, b []byte) map[string][2]int64 {
	t.Helper()
	p := &pathValues{out: map[string][2]int64{}}
	if _, _, err := indices.DecodeTree(b, indices.TreeLimits{}, p); err != nil {
		t.Errorf("decode tree: %v", err)
	}
	return p.out
}

type pathValues struct {
	frames []indices.TreeFrame
	path   []string
	out    map[string][2]int64
}

func (p *pathValues) Frames(f []indices.TreeFrame) { p.frames = f }

func (p *pathValues) Node(depth int, frame int32, self, total int64) {
	p.path = append(p.path[:depth-1], p.frames[frame].Name)
	k := strings.Join(p.path, ";")
	v := p.out[k]
	p.out[k] = [2]int64{v[0] + self, v[1] + total}
}
