// Command bench measures the indexer against a bare bulk loop on the same
// node and the bytes on disk per raw sample; bench/run.sh runs it for
// `make bench`. It needs the local Kafka and OpenSearch (make up).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

func main() {
	hosts := flag.Int("hosts", 20, "hosts in the corpus")
	profiles := flag.Int("profiles", 30, "10 s profiles per host")
	keep := flag.Bool("keep", false, "keep the indices and topics")
	samples := flag.Int("samples", 300, "pprof samples per profile (distinct stack and process pairs before merging)")
	raw := flag.Int64("raw", 50, "raw samples per pprof sample: uniform in 1..raw")
	zipf := flag.Float64("zipf", 0, "Zipf exponent (> 1) of the stack distribution; 0 is uniform")
	flag.Parse()
	corpus := indexertest.Corpus{
		Seed: 2026, Hosts: *hosts, ProfilesPerHost: *profiles,
		Start:    time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour),
		Interval: 10 * time.Second,
		Stacks:   2000, Depth: 30, Processes: 10, SamplesPerProf: *samples, RawPerSample: *raw, Zipf: *zipf,
	}
	if err := run(corpus, *keep); err != nil {
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

func run(corpus indexertest.Corpus, keep bool) error {
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

	// The bare loop: the same documents, encoded up front, POSTed back to back.
	bare := indexertest.Setup(t, brokers, url, "bench-bare-"+stamp, 1)
	var items []bulk.Item
	var sampleDocs int
	seen := map[string]bool{}
	for _, r := range recs {
		p, err := record.DecodeProfile(r.Val)
		if err != nil {
			return err
		}
		docs, err := indexer.Convert(bare.Names, r.Meta, p, r.Time)
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
				items = append(items, bulk.Item{Index: bare.Names.Stacks(), ID: s.ID, Create: true, Doc: doc})
			}
		}
		for _, s := range docs.Samples {
			items = append(items, bulk.Item{Index: s.Index, ID: s.ID, Doc: s.Doc})
		}
		sampleDocs += len(docs.Samples)
	}
	bodies := encodeBodies(items, 8<<20)
	log.Printf("corpus: %d profiles, %d sample docs, %d stacks, %d raw samples; bare loop: %d requests", len(recs), sampleDocs, len(seen), want.Raw, len(bodies))
	bareStart := time.Now()
	for _, b := range bodies {
		if err := post(ctx, bare, b); err != nil {
			return err
		}
	}
	bareDur := time.Since(bareStart)
	if got := bare.ReadStored(t); got.Check(want) != nil {
		return fmt.Errorf("bare loop stored wrong totals: %v", got.Check(want))
	}

	// The indexer: the corpus in Kafka first, then timed from start to the
	// last commit.
	ix := indexertest.Setup(t, brokers, url, "bench-ix-"+stamp, 6)
	ix.Produce(t, recs)
	kcl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second},
		append(indexer.ConsumerOpts(ix.Group, ix.Topics.ProfilesSymbolized), kgo.FetchMaxBytes(64<<20))...)
	if err != nil {
		return err
	}
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{url}, Timeout: time.Minute})
	if err != nil {
		return err
	}
	m := indexer.NewMetrics(nil)
	x := indexer.New(kcl, bulk.New(osc, bulk.Options{Metrics: m.Bulk}), indexer.Options{Names: ix.Names, DLQTopic: ix.Topics.DLQ, Metrics: m})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	ixStart := time.Now()
	go func() { done <- x.Run(rctx) }()
	ix.WaitCaughtUp(t, 30*time.Minute)
	ixDur := time.Since(ixStart)
	cancel()
	if err := <-done; err != nil {
		return err
	}
	kcl.Close()
	if got := ix.ReadStored(t); got.Check(want) != nil {
		return fmt.Errorf("indexer stored wrong totals: %v", got.Check(want))
	}

	bareBytes, err := mergedSize(ctx, bare)
	if err != nil {
		return err
	}
	ixBytes, err := mergedSize(ctx, ix)
	if err != nil {
		return err
	}
	bareRate := float64(sampleDocs) / bareDur.Seconds()
	ixRate := float64(sampleDocs) / ixDur.Seconds()
	fmt.Printf("indexer benchmark: %d hosts x %d profiles of %d pprof samples (raw 1..%d each, zipf %.1f): %d sample docs, %d raw samples (%.1f per doc), %d stacks; shared 2-core machine, numbers under load\n",
		hosts, profiles, corpus.SamplesPerProf, corpus.RawPerSample, corpus.Zipf, sampleDocs, want.Raw, float64(want.Raw)/float64(sampleDocs), len(seen))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "writer\tseconds\tsample docs/s\traw samples/s\tvs bare\tsamples store bytes\tbytes/raw sample\tbytes/doc\t")
	row := func(name string, d time.Duration, rate float64, size int64) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.0f%%\t%d\t%.2f\t%.1f\t\n", name, d.Seconds(), rate, rate*float64(want.Raw)/float64(sampleDocs),
			100*rate/bareRate, size, float64(size)/float64(want.Raw), float64(size)/float64(sampleDocs))
	}
	row("bare bulk loop", bareDur, bareRate, bareBytes)
	row("stackstream-indexer", ixDur, ixRate, ixBytes)
	return tw.Flush()
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
// their primary store size.
func mergedSize(ctx context.Context, e *indexertest.Env) (int64, error) {
	pattern := e.Names.SamplesPattern()
	if st, body, err := opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_forcemerge?max_num_segments=1", nil); err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("force merge: %d %s %v", st, body, err)
	}
	opensearch.Raw(ctx, e.OS, http.MethodPost, "/"+pattern+"/_refresh", nil)
	st, body, err := opensearch.Raw(ctx, e.OS, http.MethodGet, "/"+pattern+"/_stats/store", nil)
	if err != nil || st != http.StatusOK {
		return 0, fmt.Errorf("store stats: %d %s %v", st, body, err)
	}
	var s struct {
		All struct {
			Primaries struct {
				Store struct {
					Bytes int64 `json:"size_in_bytes"`
				} `json:"store"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return 0, err
	}
	return s.All.Primaries.Store.Bytes, nil
}
