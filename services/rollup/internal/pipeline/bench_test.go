package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

// BenchmarkEndToEnd measures the whole consumer against the real broker and
// node: 20 hosts x 10 minutes of 10 s CPU profiles (100 stacks of 10 to 30
// frames, 4 services) already in the topic; each iteration is a fresh group
// reading all of it, writing every window and stopping.
func BenchmarkEndToEnd(b *testing.B) {
	e := newEnv(b, 3)
	const hosts, perHost = 20, 60
	rng := rand.New(rand.NewPCG(3, 4))
	stacks := make([][]string, 100)
	for i := range stacks {
		for range 10 + rng.IntN(21) {
			stacks[i] = append(stacks[i], fmt.Sprintf("pkg%d.fn%d", rng.IntN(20), rng.IntN(800)))
		}
	}
	var recs []*kgo.Record
	for k := range perHost {
		for h := range hosts {
			host := fmt.Sprintf("host-%02d", h)
			pb := pproftest.NewCPU(t0.Add(time.Duration(k)*10*time.Second), 10*time.Second)
			for s, st := range stacks {
				labels := map[string]string{record.LabelService: fmt.Sprintf("svc-%d", s%4), record.LabelPID: fmt.Sprint(100 + s%4)}
				n := 1 + rng.Int64N(10)
				pb.Sample(labels, []int64{n, n * 52631578}, st...)
			}
			v, err := record.EncodeProfile(pb.Profile())
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: e.topics.ProfilesSymbolized, Key: []byte(host), Value: v,
				Headers: record.Meta{Type: record.ProfileCPU, Host: host}.Headers()})
		}
	}
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	var docs float64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := bulk.New(e.os, bulk.Options{})
		r := New(Config{Topics: e.topics, Group: fmt.Sprintf("%s-%d", e.group, i), Window: e.window}, w,
			slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		cl, err := kafka.NewClient(context.Background(), kafka.Config{Brokers: e.brokers, DialTimeout: 10 * time.Second}, r.ClientOpts()...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx, cl) }()
		for int(testutil.ToFloat64(r.m.Records.WithLabelValues("added"))) < len(recs) {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		cl.Close()
		docs += testutil.ToFloat64(r.m.docs)
		e.adm.DeleteGroups(context.Background(), fmt.Sprintf("%s-%d", e.group, i))
	}
	b.ReportMetric(float64(len(recs)*b.N)/b.Elapsed().Seconds(), "profiles/s")
	b.ReportMetric(docs/b.Elapsed().Seconds(), "docs/s")
	b.ReportMetric(docs/float64(len(recs)*b.N), "docs/profile")
}
