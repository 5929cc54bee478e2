// Package indexertest generates profile corpora with known totals, produces
// them to Kafka, and reads back what the indexer stored, for the indexer's
// tests and benchmark.
package indexertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Corpus shapes a generated set of CPU profiles.
type Corpus struct {
	Seed            uint64
	Hosts           int
	ProfilesPerHost int
	Start           time.Time
	Interval        time.Duration // between a host's profiles
	Stacks          int           // distinct stacks in the fleet
	Depth           int           // frames per stack (max)
	Processes       int           // per host
	SamplesPerProf  int           // pprof samples per profile
	RawPerSample    int64         // max raw samples one pprof sample stands for
	// Zipf > 1 picks stacks with a Zipf distribution of that exponent (a few
	// hot stacks, a long tail), as real programs do; 0 picks them uniformly.
	Zipf float64
}

// Totals are what the samples index must hold for a corpus.
type Totals struct {
	Value   map[string]int64 // per stack ID
	Raw     int64
	Records int
}

// Record is one produced profile.
type Record struct {
	Host string
	Meta record.Meta
	Time time.Time
	Val  []byte
}

// Build generates the corpus and its expected totals.
func (c Corpus) Build() ([]Record, Totals, error) {
	rng := rand.New(rand.NewPCG(c.Seed, 42))
	stacks := make([][]string, c.Stacks)
	for i := range stacks {
		depth := 1 + rng.IntN(c.Depth)
		st := make([]string, depth)
		for d := range st {
			// Real stacks share callers: a small vocabulary near the root.
			st[d] = fmt.Sprintf("pkg%d.fn%d", d%7, rng.IntN(40+d*10))
		}
		stacks[i] = st
	}
	ids := make([]string, len(stacks))
	for i, st := range stacks {
		frames := make([]indices.Frame, len(st))
		for j, n := range st {
			frames[j] = indices.Frame{Function: n}
		}
		ids[i] = indices.StackID(frames)
	}
	pick := func() int { return rng.IntN(len(stacks)) }
	if c.Zipf > 1 {
		z := rand.NewZipf(rng, c.Zipf, 1, uint64(len(stacks)-1))
		pick = func() int { return int(z.Uint64()) }
	}
	tot := Totals{Value: map[string]int64{}}
	var out []Record
	for p := range c.ProfilesPerHost {
		for h := range c.Hosts {
			host := fmt.Sprintf("host-%03d", h)
			at := c.Start.Add(time.Duration(p) * c.Interval).Add(time.Duration(h) * time.Millisecond)
			b := pproftest.NewCPU(at, c.Interval)
			for range c.SamplesPerProf {
				proc := rng.IntN(c.Processes)
				s := pick()
				raw := 1 + rng.Int64N(c.RawPerSample)
				val := raw * 10_000_000 // 100 Hz: 10 ms of CPU per raw sample
				labels := map[string]string{
					record.LabelPID:        strconv.Itoa(1000 + proc),
					record.LabelComm:       fmt.Sprintf("svc%d", proc),
					record.LabelExecutable: fmt.Sprintf("/usr/bin/svc%d", proc),
				}
				b.Sample(labels, []int64{raw, val}, stacks[s]...)
				tot.Value[ids[s]] += val
				tot.Raw += raw
			}
			// As the symbolizer writes them: stored gzip, in lz4 batches.
			v, err := record.EncodeProfileStored(b.Profile())
			if err != nil {
				return nil, tot, err
			}
			out = append(out, Record{Host: host, Meta: record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "test"}, Time: at, Val: v})
			tot.Records++
		}
	}
	return out, tot, nil
}

// WideLabelSets is few bytes of pprof naming the same long label values in
// many label sets (2,000 of 60 values of 500 bytes): more documents than
// the record's budget.
func WideLabelSets(at time.Time) *profile.Profile {
	wide := pproftest.NewCPU(at, time.Second)
	for i := range 2000 {
		l := map[string]string{"pid": fmt.Sprint(i)}
		for j := range 60 {
			l[fmt.Sprint("k", j)] = strings.Repeat("v", 500)
		}
		wide.Sample(l, []int64{1, 2}, "f")
	}
	return wide.Profile()
}

// ManyProcesses is a real shape with more documents than protobuf: a memory
// profile at at of n processes of a host with a long name, gzip-compressed
// as the symbolizer writes a profile too large for stored gzip (5,000
// processes make documents of 8 bytes per protobuf byte, 43 per record
// byte).
func ManyProcesses(t testing.TB, at time.Time, n int) Record {
	t.Helper()
	procs := pproftest.NewMemory(at, time.Second)
	for i := range n {
		procs.Sample(map[string]string{"pid": fmt.Sprint(100000 + i), "comm": fmt.Sprint("worker-", i%50), "executable": fmt.Sprint("/usr/lib/app/bin/worker-", i%50),
			"systemd_unit": "app.service", "container_id": fmt.Sprintf("%064x", i%20)}, []int64{int64(1<<20 + i)})
	}
	v, err := record.EncodeProfile(procs.Profile())
	if err != nil {
		t.Fatal(err)
	}
	host := "ip-10-0-0-1.eu-west-1.compute.internal.example-long-host-name"
	return Record{Host: host, Meta: record.Meta{Type: record.ProfileMemory, Host: host}, Time: at, Val: v}
}

// KafkaRecord is r as a profiles.symbolized record, stamped when produced as
// the agents' records are. It must not carry r.Time: the broker deletes
// records by their stamp (after 24 h in deploy/local), so a corpus dated in
// the past would vanish under a test at the next retention check.
func (r Record) KafkaRecord(topic string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(r.Host), Value: r.Val, Headers: r.Meta.Headers()}
}

// Env is one test's topics, group and index names on the shared services.
type Env struct {
	Brokers []string
	URL     string
	Topics  record.Topics
	Group   string
	Names   indices.Names
	Kafka   *kgo.Client
	Adm     *kadm.Client
	OS      *opensearchapi.Client
}

// Setup creates the topics (partitions each) under a unique prefix and
// registers clean-up of the topics and of every index under the unique index
// prefix.
func Setup(t testing.TB, brokers []string, url, name string, partitions int32) *Env {
	t.Helper()
	ctx := context.Background()
	e := &Env{Brokers: brokers, URL: url, Topics: record.TopicsFor(name + "."), Group: name + "-indexer", Names: indices.Names{Prefix: name + "-"}}
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second},
		kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.Kafka = cl
	e.Adm = kadm.NewClient(cl)
	if _, err := kafka.EnsureTopics(ctx, e.Adm, kafka.Specs(e.Topics, partitions, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Adm.DeleteTopics(context.Background(), e.Topics.All()...) })
	e.OS, err = opensearch.NewClient(ctx, opensearch.Config{URLs: []string{url}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opensearch.ApplyTemplates(ctx, e.OS, e.Names.Prefix, indices.Settings{Replicas: 0, RefreshInterval: "1s"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), e.OS, e.Names.Prefix) })
	return e
}

// Produce writes recs to profiles.symbolized and waits for every ack.
func (e *Env) Produce(t testing.TB, recs []Record) {
	t.Helper()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = r.KafkaRecord(e.Topics.ProfilesSymbolized)
	}
	if err := e.Kafka.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// Committed returns the group's committed offsets on profiles.symbolized by partition.
func (e *Env) Committed(t testing.TB) map[int32]int64 {
	t.Helper()
	resp, err := e.Adm.FetchOffsets(context.Background(), e.Group)
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == e.Topics.ProfilesSymbolized && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// Ends returns the end offsets of profiles.symbolized by partition.
func (e *Env) Ends(t testing.TB) map[int32]int64 {
	t.Helper()
	ends, err := e.Adm.ListEndOffsets(context.Background(), e.Topics.ProfilesSymbolized)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// WaitCaughtUp waits until the group committed every partition's end offset.
func (e *Env) WaitCaughtUp(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ends, com := e.Ends(t), e.Committed(t)
		done := true
		for p, end := range ends {
			if end > 0 && com[p] < end {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s did not catch up within %s: committed %v, ends %v", e.Group, timeout, com, ends)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stored is what the samples index holds, read with aggregations (its
// _source is disabled).
type Stored struct {
	Docs  int64
	Value map[string]int64 // per stack ID
	Raw   int64            // raw samples
}

// ReadStored refreshes the samples indices and sums the values per stack with
// the script the query service uses, and the raw samples.
func (e *Env) ReadStored(t testing.TB) Stored {
	t.Helper()
	ctx := context.Background()
	pattern := e.Names.SamplesPattern()
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_refresh", nil); err != nil || st != http.StatusOK {
		t.Fatalf("refresh: %d %s %v", st, body, err)
	}
	q, _ := json.Marshal(map[string]any{"size": 0, "track_total_hits": true, "aggs": map[string]any{
		"stacks": map[string]any{"scripted_metric": indices.StackSumsScript()},
		"raw":    map[string]any{"sum": map[string]any{"field": "count"}},
	}})
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_search", q)
	if err != nil || st != http.StatusOK {
		t.Fatalf("search: %d %s %v", st, body, err)
	}
	var resp struct {
		Hits struct {
			Total struct {
				Value int64 `json:"value"`
			} `json:"total"`
		} `json:"hits"`
		Aggs struct {
			Stacks struct {
				Value map[string]int64 `json:"value"`
			} `json:"stacks"`
			Raw struct {
				Value float64 `json:"value"`
			} `json:"raw"`
		} `json:"aggregations"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	s := Stored{Docs: resp.Hits.Total.Value, Value: resp.Aggs.Stacks.Value, Raw: int64(resp.Aggs.Raw.Value)}
	if s.Value == nil {
		s.Value = map[string]int64{}
	}
	return s
}

// Check compares stored sums with the expected totals.
func (s Stored) Check(want Totals) error {
	if len(s.Value) != len(want.Value) {
		return fmt.Errorf("stored %d stacks, want %d", len(s.Value), len(want.Value))
	}
	for id, v := range want.Value {
		if s.Value[id] != v {
			return fmt.Errorf("stack %s: value %d, want %d", id, s.Value[id], v)
		}
	}
	if s.Raw != want.Raw {
		return fmt.Errorf("raw samples %d, want %d", s.Raw, want.Raw)
	}
	return nil
}

// CountDocs returns the number of documents in index (after a refresh).
func (e *Env) CountDocs(t testing.TB, index string) int64 {
	t.Helper()
	ctx := context.Background()
	opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+index+"/_refresh", nil)
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodGet, "/"+index+"/_count", nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("count %s: %d %s %v", index, st, body, err)
	}
	var resp struct {
		Count int64 `json:"count"`
	}
	json.Unmarshal(body, &resp)
	return resp.Count
}

// ReadDLQ consumes the DLQ topic from the start until want records arrived or timeout.
func (e *Env) ReadDLQ(t testing.TB, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.ConsumeTopics(e.Topics.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
