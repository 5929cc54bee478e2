package api_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// BenchmarkSeriesDay1000Hosts times /series over one day of 1000 hosts'
// CPU rollups as the rollup writes them (a minute, a 10-minute and an hour
// window per host and service: 1.44 M minute, 144,000 10-minute and 24,000
// hour documents) on the real node, through HTTP on loopback: per host (the
// top 10 and "other") and per service, with the automatic step and with
// whole hours, and the last hour of 100 of the hosts; per host too, a day
// moving on by 10 minutes a request, ending 6 hours before now and ending
// at now (on a server of its own whose clock moves with it), and by 30
// seconds a request ending at now (a dashboard's refresh). OpenSearch's
// request cache is cleared before each request (outside the timing). It
// reports the p50 and p99 of the requests.
//
//	STACKSTREAM_BENCH_FLEET_DAY=1 CI=true go test -run '^$' -bench SeriesDay -benchtime 20x -timeout 40m ./internal/api
//
// With STACKSTREAM_BENCH_FLEET_DAY_KEEP=<prefix> (lowercase letters, digits
// and '-') the fleet is indexed under that prefix and kept after the run,
// and a later run with the same prefix reads it again without indexing.
func BenchmarkSeriesDay1000Hosts(b *testing.B) {
	if os.Getenv("STACKSTREAM_BENCH_FLEET_DAY") == "" {
		b.Skip("set STACKSTREAM_BENCH_FLEET_DAY=1 to index a fleet's day")
	}
	const hosts = 1000
	cl, names, kept := fleetDayIndex(b)
	to := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	from := to.Add(-24 * time.Hour)
	start := time.Now()
	for h := from; h.Before(to) && !kept; h = h.Add(time.Hour) {
		docs := make([]querytest.Doc, 0, hosts*67)
		for i := range hosts {
			host, service := fmt.Sprintf("host-%04d", i), fmt.Sprintf("svc-%02d", i%50)
			cores := float64(i%97+1) / 10
			doc := indices.RollupDoc{Kind: "service", Type: "cpu", Service: service, Host: host}
			for m := range 60 {
				doc.Timestamp, doc.Resolution = h.Add(time.Duration(m)*time.Minute), "1m"
				doc.Value, doc.Cores = int64(cores*float64(time.Minute)), cores
				doc.StackValue = doc.Value
				docs = append(docs, querytest.Rollup(names, doc))
			}
			for w := range 6 {
				doc.Timestamp, doc.Resolution = h.Add(time.Duration(w)*10*time.Minute), "10m"
				doc.Value, doc.Cores = 10*int64(cores*float64(time.Minute)), cores
				doc.StackValue = doc.Value
				docs = append(docs, querytest.Rollup(names, doc))
			}
			doc.Timestamp, doc.Resolution = h, "1h"
			doc.Value, doc.Cores = 60*int64(cores*float64(time.Minute)), cores
			doc.StackValue = doc.Value
			docs = append(docs, querytest.Rollup(names, doc))
		}
		if err := querytest.Bulk(b.Context(), cl, docs); err != nil {
			b.Fatal(err)
		}
		b.Logf("indexed hour %s (%v)", h.Format("15:04"), time.Since(start).Round(time.Second))
	}
	if !kept {
		if err := querytest.Refresh(b.Context(), cl, names); err != nil {
			b.Fatal(err)
		}
		// Merged segments, as a day-old index is (searched once refreshed).
		opensearch.Raw(b.Context(), cl, http.MethodPost, "/"+names.Prefix+"*/_forcemerge?max_num_segments=1", nil)
		if err := querytest.Refresh(b.Context(), cl, names); err != nil {
			b.Fatal(err)
		}
		b.Logf("indexed %d hosts x 24 h in %v", hosts, time.Since(start).Round(time.Second))
		markFleetDay(b, cl, names)
	}
	base := serve(b, cl, names, api.Options{})
	for _, tc := range []struct {
		name, groupBy, step, query string
		rng                        time.Duration
		// roll: each request 10 minutes later than the one before, ending
		// before now (rollPast) or at now (rollNow: the clock moves with
		// it, on a server of its own, so the chart's line count, kept a
		// minute, is read again on each request and the last windows are
		// still filling).
		roll int
		// every is how far each rolling request moves on (10 minutes
		// when zero).
		every time.Duration
	}{
		{"by-host-top10-auto-step", "host", "", "", 24 * time.Hour, 0, 0}, {"by-host-top10-step-1h", "host", "1h", "", 24 * time.Hour, 0, 0},
		// A dashboard's day moving on: every request has a window more
		// at its end and one less at its start than the one before.
		{"by-host-top10-auto-step-rolling", "host", "", "", 24 * time.Hour, rollPast, 0},
		// now-24h on a dashboard refreshed every 10 minutes.
		{"by-host-top10-auto-step-rolling-now", "host", "", "", 24 * time.Hour, rollNow, 0},
		// now-24h on a dashboard refreshed every 30 seconds: a window
		// closes every 20th request, the line count is read every other.
		{"by-host-top10-auto-step-rolling-now-30s", "host", "", "", 24 * time.Hour, rollNow, 30 * time.Second},
		{"by-service-auto-step", "service", "", "", 24 * time.Hour, 0, 0}, {"by-service-step-1h", "service", "1h", "", 24 * time.Hour, 0, 0},
		// The automatic step before it was 10 minutes for long ranges:
		// minute windows.
		{"by-host-top10-step-5m", "host", "5m", "", 24 * time.Hour, 0, 0}, {"by-service-step-5m", "service", "5m", "", 24 * time.Hour, 0, 0},
		{"1h-100-hosts-by-host-auto-step", "host", "", `{host=~"host-00[0-9][0-9]"}`, time.Hour, 0, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := url.Values{"from": {to.Add(-tc.rng).Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "group_by": {tc.groupBy}, "top": {"10"}}
			if tc.step != "" {
				q.Set("step", tc.step)
			}
			if tc.query != "" {
				q.Set("query", tc.query)
			}
			srv := base
			end := to.Add(-6 * time.Hour) // rolling: 36 requests before the end of the data
			var clock atomic.Int64
			if tc.roll == rollNow {
				srv = serveClock(b, cl, names, &clock)
			}
			u := srv + "/api/v1/series?" + q.Encode()
			var took []time.Duration
			for b.Loop() {
				b.StopTimer()
				if tc.roll != 0 {
					end = end.Add(cmp.Or(tc.every, 10*time.Minute))
					clock.Store(end.UnixNano())
					q.Set("from", end.Add(-tc.rng).Format(time.RFC3339))
					q.Set("to", end.Format(time.RFC3339))
					u = srv + "/api/v1/series?" + q.Encode()
				}
				opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.Prefix+"*/_cache/clear?request=true", nil)
				b.StartTimer()
				t0 := time.Now()
				resp, err := http.Get(u)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %v %v", u, err, resp)
				}
				resp.Body.Close()
				took = append(took, time.Since(t0))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// The rolling cases of BenchmarkSeriesDay1000Hosts.
const (
	rollPast = 1 + iota
	rollNow
)

// serveClock serves the API with its clock at clock (unix ns).
func serveClock(b *testing.B, cl *opensearchapi.Client, names indices.Names, clock *atomic.Int64) string {
	srv := httptest.NewServer(api.New(cl, names, api.Options{Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }},
		slog.New(slog.NewTextHandler(io.Discard, nil))))
	b.Cleanup(srv.Close)
	return srv.URL
}

// fleetDayIndex is the fleet day's client and index names: a fresh prefix
// deleted at the end, or, with STACKSTREAM_BENCH_FLEET_DAY_KEEP, a kept one
// (kept reports that a previous run indexed it completely).
func fleetDayIndex(b *testing.B) (cl *opensearchapi.Client, names indices.Names, kept bool) {
	prefix := os.Getenv("STACKSTREAM_BENCH_FLEET_DAY_KEEP")
	if prefix == "" {
		cl, names = querytest.Setup(b)
		return cl, names, false
	}
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,40}$`).MatchString(prefix) {
		b.Fatalf("STACKSTREAM_BENCH_FLEET_DAY_KEEP=%q: use up to 41 lowercase letters, digits and '-'", prefix)
	}
	cl, err := opensearch.NewClient(b.Context(), opensearch.Config{URLs: []string{testenv.OpenSearchURL(b)}, Timeout: time.Minute})
	if err != nil {
		b.Fatalf("opensearch client: %v", err)
	}
	names = indices.Names{Prefix: prefix + "-"}
	status, _, err := opensearch.Raw(b.Context(), cl, http.MethodGet, "/"+names.Prefix+fleetDayMark, nil)
	if err == nil && status == http.StatusOK {
		return cl, names, true
	}
	// An interrupted run's documents are indexed again over themselves.
	if _, err := opensearch.ApplyTemplates(b.Context(), cl, names.Prefix, indices.Settings{Replicas: 0, RefreshInterval: "-1"}); err != nil {
		b.Fatalf("apply templates: %v", err)
	}
	return cl, names, false
}

// fleetDayMark is the index whose presence says a kept fleet day is whole.
const fleetDayMark = "fleet-day-complete"

// markFleetDay records that the kept fleet day of names is whole.
func markFleetDay(b *testing.B, cl *opensearchapi.Client, names indices.Names) {
	if os.Getenv("STACKSTREAM_BENCH_FLEET_DAY_KEEP") == "" {
		return
	}
	if status, body, err := opensearch.Raw(b.Context(), cl, http.MethodPut, "/"+names.Prefix+fleetDayMark, nil); err != nil || status != http.StatusOK {
		b.Fatalf("mark the fleet day indexed: HTTP %d %v: %s", status, err, body)
	}
}
