// Command bench measures the query API over generated data for a fleet of
// simulated hosts: it indexes samples (1 hour) and rollups (24 hours)
// through the real templates under a unique prefix, serves the API over
// them and prints p50/p99 latencies of series, flamegraph and search.
//
//	go run ./bench [-hosts 100] [-n 20]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

type params struct {
	hosts, services, stacksPerService, stacksPerHost, n int
	keep                                                bool
	only, reuse                                         string
}

func main() {
	var p params
	flag.IntVar(&p.hosts, "hosts", 100, "simulated hosts")
	flag.IntVar(&p.services, "services", 10, "services (hosts are spread evenly)")
	flag.IntVar(&p.stacksPerService, "stacks-per-service", 300, "distinct stacks of each service")
	flag.IntVar(&p.stacksPerHost, "stacks-per-host", 40, "distinct stacks each host reports every minute")
	flag.IntVar(&p.n, "n", 20, "measured requests per query")
	flag.BoolVar(&p.keep, "keep", false, "keep the generated indices")
	flag.StringVar(&p.only, "only", "", "run only the queries whose name contains this")
	flag.StringVar(&p.reuse, "reuse", "", "query the data kept (-keep) under this prefix instead of generating")
	flag.Parse()
	if err := run(p); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(p params) error {
	ctx := context.Background()
	u := os.Getenv("STACKSTREAM_TEST_OPENSEARCH_URL")
	if u == "" {
		u = "http://127.0.0.1:9200"
	}
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{u}, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	names, h, err := prepare(ctx, cl, p)
	if err != nil {
		return err
	}
	if !p.keep {
		defer querytest.Cleanup(context.Background(), cl, names)
	}

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	newServer := func() *httptest.Server {
		return httptest.NewServer(api.New(cl, names, api.Options{Now: func() time.Time { return h }}, logger))
	}
	day := url.Values{"from": {h.Add(-24 * time.Hour).Format(time.RFC3339)}, "to": {h.Format(time.RFC3339)}}
	hour := url.Values{"from": {h.Add(-time.Hour).Format(time.RFC3339)}, "to": {h.Format(time.RFC3339)}}
	with := func(v url.Values, kv ...string) url.Values {
		out := url.Values{}
		for k, vs := range v {
			out[k] = vs
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	queries := []struct {
		name, rng, path string
		params          url.Values
	}{
		{"series cpu by service", "1h", "/api/v1/series", hour},
		{"series cpu by service", "24h", "/api/v1/series", day},
		{"series cpu by host", "24h", "/api/v1/series", with(day, "group_by", "host")},
		{"series one function", "1h", "/api/v1/series", with(hour, "function", "svc3/pkg0.Handle0")},
		{"series one function", "24h", "/api/v1/series", with(day, "function", "svc3/pkg0.Handle0")},
		{"flamegraph all", "1h", "/api/v1/flamegraph", hour},
		{"flamegraph one service", "1h", "/api/v1/flamegraph", with(hour, "query", `{service="svc-3"}`)},
		{"flamegraph all", "24h", "/api/v1/flamegraph", day},
		{"flamegraph one service", "24h", "/api/v1/flamegraph", with(day, "query", `{service="svc-3"}`)},
		{"top functions", "1h", "/api/v1/top", hour},
		{"search function", "1h", "/api/v1/search", with(hour, "q", "Handle")},
		{"search function", "24h", "/api/v1/search", with(day, "q", "Handle")},
		{"search host", "24h", "/api/v1/search", with(day, "q", "host-4")},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "query\trange\tcold ms\tp50 ms\tp99 ms\tmax ms\tn\tresult\t")
	for _, q := range queries {
		if !strings.Contains(q.name, p.only) {
			continue
		}
		// Cold: a fresh API (empty stack cache) and OpenSearch's request cache cleared.
		srv := newServer()
		clearCache(ctx, cl, names)
		cold, result, err := measure(srv.URL + q.path + "?" + q.params.Encode())
		if err != nil {
			return fmt.Errorf("%s %s: %w", q.name, q.rng, err)
		}
		var lat []time.Duration
		for i := 0; i < p.n; i++ {
			// Each request misses OpenSearch's request cache, as a moving
			// "now" does in production; the API's stack cache stays warm.
			clearCache(ctx, cl, names)
			d, _, err := measure(srv.URL + q.path + "?" + q.params.Encode())
			if err != nil {
				return fmt.Errorf("%s %s: %w", q.name, q.rng, err)
			}
			lat = append(lat, d)
		}
		srv.Close()
		slices.Sort(lat)
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%s\t\n", q.name, q.rng, ms(cold), ms(pct(lat, 50)), ms(pct(lat, 99)), ms(lat[len(lat)-1]), len(lat), result)
	}
	tw.Flush()
	fmt.Printf("\nload average after the queries: %s\n", loadavg())
	fmt.Println("latency is client-side over HTTP on loopback, requests one at a time; machine shared with other work")
	return nil
}

// loadavg shows how busy the (shared) machine was.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}

func measure(u string) (time.Duration, string, error) {
	start := time.Now()
	resp, err := http.Get(u)
	if err != nil {
		return 0, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
	}
	return d, summarize(body), nil
}

// summarize shows a little of the answer so a broken query is visible.
func summarize(body []byte) string {
	s := string(body)
	for _, key := range []string{`"truncated":true`, `"source":"rollups"`, `"source":"samples"`} {
		if strings.Contains(s, key) {
			return strings.Trim(strings.ReplaceAll(key, `"`, ""), "{}") + fmt.Sprintf(" %dB", len(body))
		}
	}
	return fmt.Sprintf("%dB", len(body))
}

func clearCache(ctx context.Context, cl *opensearchapi.Client, names indices.Names) {
	opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.Prefix+"*/_cache/clear?request=true", nil)
}

// prepare generates the data under a new prefix, or finds the kept data
// of -reuse; h is the end of the data (the top of the hour it was made in).
func prepare(ctx context.Context, cl *opensearchapi.Client, p params) (indices.Names, time.Time, error) {
	if p.reuse != "" {
		names := indices.Names{Prefix: p.reuse}
		var out struct {
			Aggregations struct {
				Last struct {
					Value float64 `json:"value"`
				} `json:"last"`
			} `json:"aggregations"`
		}
		body := `{"size":0,"aggs":{"last":{"max":{"field":"@timestamp"}}}}`
		status, raw, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.SamplesPattern()+"/_search", []byte(body))
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Aggregations.Last.Value == 0 {
			return names, time.Time{}, fmt.Errorf("find the data under %s: HTTP %d %v %.200s", p.reuse, status, err, raw)
		}
		h := time.UnixMilli(int64(out.Aggregations.Last.Value)).UTC().Add(time.Minute)
		fmt.Printf("reusing %s (data up to %s)\nload average before the queries: %s\n\n", p.reuse, h.Format(time.RFC3339), loadavg())
		return names, h, nil
	}
	b := make([]byte, 4)
	rand.Read(b)
	names := indices.Names{Prefix: "bench-query-" + hex.EncodeToString(b) + "-"}
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.Settings{Replicas: 0, RefreshInterval: "-1"}); err != nil {
		return names, time.Time{}, err
	}
	// Whole hours, so the 24 h range reads hourly rollups only (see docs/QUERY.md).
	h := time.Now().UTC().Truncate(time.Hour)
	start := time.Now()
	counts, err := generate(ctx, cl, names, h, p)
	if err == nil {
		err = querytest.Refresh(ctx, cl, names)
	}
	if err != nil {
		querytest.Cleanup(context.Background(), cl, names)
		return names, h, err
	}
	fmt.Printf("generated %s in %s (prefix %s)\nload average before the queries: %s\n\n", counts, time.Since(start).Round(time.Second), names.Prefix, loadavg())
	return names, h, nil
}

// fleet is the generated shape: each service has its stacks, each host a
// subset it reports every minute with fixed weights.
type fleet struct {
	stacks    [][][]string // service -> stack -> frames root first
	stackIDs  [][]string
	hostStack [][]int // host -> indexes into its service's stacks
	weights   [][]int64
}

func newFleet(p params, rng *mrand.Rand) *fleet {
	f := &fleet{}
	runtimeFuncs := []string{"runtime.mallocgc", "runtime.memmove", "runtime.mapaccess2", "runtime.gcBgMarkWorker", "syscall.Syscall", "runtime.newobject", "runtime.growslice", "runtime.scanobject"}
	for s := 0; s < p.services; s++ {
		pool := make([]string, 80)
		verbs := []string{"Handle", "Encode", "Decode", "Query", "Render", "Validate", "Compute", "Fetch"}
		for i := range pool {
			pool[i] = fmt.Sprintf("svc%d/pkg%d.%s%d", s, i%12, verbs[i%len(verbs)], i)
		}
		var stacks [][]string
		var ids []string
		for i := 0; i < p.stacksPerService; i++ {
			depth := 6 + rng.IntN(16)
			frames := []string{"runtime.main", "main.main"}
			for d := 0; d < depth; d++ {
				frames = append(frames, pool[rng.IntN(len(pool))])
			}
			if rng.IntN(3) == 0 {
				frames = append(frames, runtimeFuncs[rng.IntN(len(runtimeFuncs))])
			}
			stacks = append(stacks, frames)
			leafFirst := make([]indices.Frame, len(frames))
			for j, fn := range frames {
				leafFirst[len(frames)-1-j] = indices.Frame{Function: fn, Binary: fmt.Sprintf("svc-%d", s)}
			}
			ids = append(ids, indices.StackID(leafFirst))
		}
		f.stacks = append(f.stacks, stacks)
		f.stackIDs = append(f.stackIDs, ids)
	}
	for h := 0; h < p.hosts; h++ {
		perm := rng.Perm(p.stacksPerService)[:p.stacksPerHost]
		w := make([]int64, len(perm))
		for i := range w {
			// A few hot stacks and a long tail, about one core per host.
			w[i] = int64(float64(60e9) / float64(i+2) / 3.5)
		}
		f.hostStack = append(f.hostStack, perm)
		f.weights = append(f.weights, w)
	}
	return f
}

type counts map[string]int

func (c counts) String() string {
	var parts []string
	total := 0
	for _, k := range []string{"stacks", "samples", "rollups/service", "rollups/stack", "rollups/function"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		total += c[k]
	}
	return fmt.Sprintf("%d documents (%s)", total, strings.Join(parts, ", "))
}

// generate indexes the fleet's documents in batches, two bulk requests in
// flight so encoding overlaps indexing without crowding the shared cores.
func generate(ctx context.Context, cl *opensearchapi.Client, names indices.Names, h time.Time, p params) (counts, error) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	f := newFleet(p, rng)
	c := counts{}
	batches := make(chan []querytest.Doc, 2)
	errc := make(chan error, 2)
	for w := 0; w < 2; w++ {
		go func() {
			var first error
			for b := range batches {
				if first == nil {
					first = querytest.Bulk(ctx, cl, b)
				}
			}
			errc <- first
		}()
	}
	var buf []querytest.Doc
	emit := func(kind string, d querytest.Doc) {
		c[kind]++
		buf = append(buf, d)
		if len(buf) == 5000 {
			batches <- buf
			buf = nil
		}
	}
	for s := range f.stacks {
		for i, frames := range f.stacks[s] {
			d, _ := querytest.Stack(names, h.Add(-24*time.Hour), frames...)
			d.ID = f.stackIDs[s][i]
			emit("stacks", d)
		}
	}
	service := func(host int) (string, string) {
		return fmt.Sprintf("svc-%d", host%p.services), fmt.Sprintf("host-%d", host)
	}
	for host := 0; host < p.hosts; host++ {
		svc, hostName := service(host)
		s := host % p.services
		// Samples: the last hour, one profile per minute, one document
		// per profile holding the host's stacks.
		for m := 60; m >= 1; m-- {
			at := h.Add(-time.Duration(m) * time.Minute)
			stacks := make([]indices.SampleDoc, 0, len(f.hostStack[host]))
			for i, st := range f.hostStack[host] {
				stacks = append(stacks, indices.SampleDoc{
					Timestamp: at, Type: "cpu", Host: hostName, Service: svc, StackIDs: []string{f.stackIDs[s][st]},
					Value: f.weights[host][i], Count: f.weights[host][i] / 1e7,
					Labels: map[string]string{"comm": svc, "pid": fmt.Sprint(1000 + host), "k8s_pod": fmt.Sprintf("%s-%d", svc, host)},
				})
			}
			for _, d := range querytest.Samples(names, stacks...) {
				emit("samples", d)
			}
		}
		var perMinute int64
		for _, w := range f.weights[host] {
			perMinute += w
		}
		// Service rollups: 24 hours of minutes and hours.
		for m := 24 * 60; m >= 1; m-- {
			at := h.Add(-time.Duration(m) * time.Minute)
			emit("rollups/service", querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: "1m", Kind: "service", Type: "cpu",
				Service: svc, Host: hostName, Value: perMinute, Cores: float64(perMinute) / 60e9, Samples: 6000}))
		}
		self, total := map[string]int64{}, map[string]int64{}
		for i, st := range f.hostStack[host] {
			frames := f.stacks[s][st]
			v := 60 * f.weights[host][i]
			self[frames[len(frames)-1]] += v
			seen := map[string]bool{}
			for _, fn := range frames {
				if !seen[fn] {
					seen[fn] = true
					total[fn] += v
				}
			}
		}
		for hr := 24; hr >= 1; hr-- {
			at := h.Add(-time.Duration(hr) * time.Hour)
			emit("rollups/service", querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: "1h", Kind: "service", Type: "cpu",
				Service: svc, Host: hostName, Value: 60 * perMinute, Cores: float64(perMinute) / 60e9, Samples: 360000}))
			var stacks []indices.RollupDoc
			for i, st := range f.hostStack[host] {
				stacks = append(stacks, indices.RollupDoc{Timestamp: at, Resolution: "1h", Kind: indices.KindStack, Type: "cpu",
					Service: svc, Host: hostName, StackIDs: []string{f.stackIDs[s][st]}, Value: 60 * f.weights[host][i]})
			}
			for _, d := range querytest.StackRollups(names, stacks) {
				emit("rollups/stack", d)
			}
			for fn, t := range total {
				emit("rollups/function", querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: "1h", Kind: "function", Type: "cpu",
					Service: svc, Host: hostName, Function: fn, Self: self[fn], Total: t}))
			}
		}
	}
	if len(buf) > 0 {
		batches <- buf
	}
	close(batches)
	for w := 0; w < 2; w++ {
		if err := <-errc; err != nil {
			return c, err
		}
	}
	return c, nil
}
