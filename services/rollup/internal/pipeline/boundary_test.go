package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// TestHourBoundaryWithinBudget (real Kafka and OpenSearch): hosts whose
// stacks change every interval fill an hour window, then run 12 minutes
// into the next hour; the consumer reads it all in one poll. Folding the
// next hour's profiles while the ended hour is held whole needs more than
// the budget (measured below with a Partition fed the same profiles in one
// batch); the consumer writes and freezes the ended hour as soon as a
// record ends it, so nothing goes to the DLQ and every total is exact.
func TestHourBoundaryWithinBudget(t *testing.T) {
	e := newEnv(t, 1)
	e.window.AllowedLateness, e.window.Retention = 2*time.Minute, 10*time.Minute
	e.flushTimeout = 2 * time.Minute // every window of 42 minutes written at the stop
	const hosts = 2
	start := t0.Add(30 * time.Minute)
	var ins []aggregate.Input
	produced := map[time.Time]int64{}
	for k := range 6 * 42 { // 10:30 to 11:11:50
		at := start.Add(time.Duration(k) * 10 * time.Second)
		for h := range hosts {
			host := fmt.Sprintf("web-%d", h)
			prof := changingStacks(at, h, k)
			ins = append(ins, aggregate.Input{Profile: prof, Type: record.ProfileCPU, Host: host, Offset: int64(len(ins))})
			for _, s := range prof.Sample {
				produced[at.Truncate(time.Hour)] += s.Value[1]
			}
		}
	}
	oneBatch, frozen := boundaryPeak(t, e.window, ins, false), boundaryPeak(t, e.window, ins, true)
	t.Logf("window state: %d bytes at most folded in one batch, %d with the ended hour frozen at once", oneBatch, frozen)
	if oneBatch < frozen*6/5 {
		t.Fatalf("the fleet does not show the boundary: %d bytes in one batch, %d frozen", oneBatch, frozen)
	}
	e.window.Budget = &aggregate.Budget{MaxBytes: (oneBatch + frozen) / 2}
	// In time order, as the hosts' agents publish them.
	recs := make([]*kgo.Record, 0, len(ins))
	for _, in := range ins {
		v, err := record.EncodeProfile(in.Profile)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: e.topics.ProfilesSymbolized, Key: []byte(in.Host), Value: v,
			Headers: record.Meta{Type: record.ProfileCPU, Host: in.Host, AgentVersion: "test"}.Headers()})
	}
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	in := e.start(e.osURL)
	// A bound for a stuck consumer, not a timing: under other tests' load
	// writing the ended hour took past 2 minutes (62 s alone at load 18).
	waitFor(t, "every record handled", 5*time.Minute, func() bool { return in.count("added")+in.count("dlq") == len(ins) })
	in.close(t)
	if n := in.count("dlq"); n > 0 {
		t.Fatalf("%d records went to the DLQ, %v state_full", n, testutil.ToFloat64(in.r.m.DLQ.WithLabelValues("state_full")))
	}
	for _, hour := range []time.Time{t0, t0.Add(time.Hour)} {
		services := e.sumValue(indices.KindService, indices.ResolutionHour, hour)
		trees := e.sumValue(indices.KindPartitionTree, indices.ResolutionHour, hour)
		if want := produced[hour]; services != want || trees != want {
			t.Errorf("hour %s: service documents %d, partition tree %d, produced %d", hour.Format("15:04"), services, trees, want)
		}
	}
}

// sumValue sums the value of the rollups of a kind and resolution at t
// (more documents than e.docs reads).
func (e *env) sumValue(kind, res string, t time.Time) int64 {
	e.t.Helper()
	q := fmt.Sprintf(`{"size":0,"query":{"bool":{"filter":[{"term":{"kind":%q}},{"term":{"resolution":%q}},{"term":{"@timestamp":%q}}]}},"aggs":{"v":{"sum":{"field":"value"}}}}`,
		kind, res, t.UTC().Format(time.RFC3339))
	pattern := e.names.RollupsPattern()
	if status, body, err := opensearch.Raw(context.Background(), e.os, http.MethodPost, "/"+pattern+"/_refresh", nil); err != nil || status != http.StatusOK {
		e.t.Fatalf("refresh: %d %s %v", status, body, err)
	}
	status, body, err := opensearch.Raw(context.Background(), e.os, http.MethodPost, "/"+pattern+"/_search", []byte(q))
	if err != nil || status != http.StatusOK {
		e.t.Fatalf("search: %d %s %v", status, body, err)
	}
	var resp struct {
		Aggregations struct {
			V struct {
				Value float64 `json:"value"`
			} `json:"v"`
		} `json:"aggregations"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		e.t.Fatal(err)
	}
	// Exact below 2^53: these sums are under 10^9.
	return int64(resp.Aggregations.V.Value)
}

// changingStacks is host h's profile of interval k: 40 stacks of its own
// that no other interval has (a new leaf under shared callers), so an hour
// window holds ever more stacks, as a fleet's does with its deploys and
// per-host variants.
func changingStacks(at time.Time, h, k int) *profile.Profile {
	b := pproftest.NewCPU(at, 10*time.Second)
	labels := map[string]string{record.LabelService: "checkout", record.LabelPID: "1"}
	for i := range 40 {
		b.Sample(labels, []int64{1, int64(1000*i + k)}, fmt.Sprintf("leaf_h%d_k%d_i%d", h, k, i), fmt.Sprintf("work%d", i%10), "serve", "main")
	}
	return b.Profile()
}

// boundaryPeak folds the inputs through a Partition with no budget as the
// consumer does with one poll of them all (frozen: writing and freezing
// an ended hour as soon as a record ends it) and returns the largest
// window state charged.
func boundaryPeak(t *testing.T, cfg aggregate.Config, ins []aggregate.Input, frozen bool) int64 {
	t.Helper()
	cfg.Budget = &aggregate.Budget{MaxBytes: math.MaxInt64}
	p := aggregate.NewPartition(cfg, aggregate.Checkpoint{})
	flush := func() {
		aggregate.MarkStored(p.Pending(false))
		p.Evict()
	}
	var peak int64
	for _, in := range ins {
		if _, err := p.Add(in); err != nil && !errors.Is(err, aggregate.ErrStateFull) {
			t.Fatal(err)
		}
		peak = max(peak, cfg.Budget.Used()-cfg.Budget.CacheBytes())
		if frozen && p.HoldsEndedHour() {
			flush()
		}
	}
	return peak
}
