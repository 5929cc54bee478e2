package publish

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestPublishAfter holds a record behind an answer that has not come: the
// records handed over after it wait too (order is kept), all are produced
// once the answer comes, and a record whose answer never comes is produced
// after HoldConfig.Max, counted, as is one whose answer is a failure.
func TestPublishAfter(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := record.TopicsFor(testenv.Name(t, "agent-") + ".")
	cl, err := kgo.NewClient(append(Opts(Config{BufferRecords: 100, BufferBytes: 1 << 20}, topics.Debuginfo), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 1, 1)); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topics.All()...)

	m := NewMetrics(prometheus.NewRegistry())
	p := New(cl, slog.New(slog.NewTextHandler(os.Stderr, nil)), m, HoldConfig{Max: time.Hour, Records: 8})
	var mu sync.Mutex
	var produced []string
	p.OnProduce = func(_ string, r *kgo.Record) {
		mu.Lock()
		defer mu.Unlock()
		produced = append(produced, string(r.Key))
	}
	order := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), produced...)
	}
	rec := func(key string) *kgo.Record {
		return &kgo.Record{Topic: topics.ProfilesRaw, Key: []byte(key), Value: []byte("v")}
	}
	pending := &Ack{done: make(chan struct{})}
	p.PublishAfter("cpu", rec("a"), []*Ack{pending})
	p.PublishAfter("memory", rec("b"), nil)
	// Nothing to wait for on this side: give the release goroutine time
	// to (wrongly) produce b ahead of a.
	time.Sleep(200 * time.Millisecond)
	if got := order(); len(got) != 0 {
		t.Fatalf("produced %v while a waits", got)
	}
	close(pending.done)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := order(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("produced %v, want [a b]", got)
	}

	failed := &Ack{done: make(chan struct{}), err: kgo.ErrRecordTimeout}
	close(failed.done)
	p.PublishAfter("cpu", rec("c"), []*Ack{failed})
	short := New(cl, slog.New(slog.NewTextHandler(os.Stderr, nil)), m, HoldConfig{Max: 100 * time.Millisecond, Records: 8})
	short.PublishAfter("cpu", rec("d"), []*Ack{{done: make(chan struct{})}})
	for _, pub := range []*Publisher{p, short} {
		if err := pub.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for reason, want := range map[string]float64{"failed": 1, "timeout": 1, "full": 0} {
		if got := testutil.ToFloat64(m.Unheld.WithLabelValues(reason)); got != want {
			t.Errorf("unheld{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.Sent.WithLabelValues("cpu")); got != 3 {
		t.Fatalf("%v cpu records acknowledged, want 3", got)
	}
}
