package pipeline

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUnsentRetriedUnderNewContext: DLQ records whose produce failed because
// its context ended (a stop while a flush was sending them) are sent by the
// next flush, under that flush's context. Before, kgo kept the first,
// cancelled context on the records and the final flush failed with
// "context canceled" (seen as a flaky TestBadInputGoesToDLQ).
func TestUnsentRetriedUnderNewContext(t *testing.T) {
	e := newEnv(t, 1)
	r := New(Config{Topics: e.topics}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	r.cl = e.prod

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &kgo.Record{Topic: e.topics.DLQ, Value: []byte("poison")}
	if err := r.produce(cancelled, []*kgo.Record{rec}); err == nil {
		t.Fatal("produce under a cancelled context succeeded")
	}
	if len(r.unsent) != 1 {
		t.Fatalf("%d records kept unsent, want 1", len(r.unsent))
	}
	if err := r.produce(context.Background(), nil); err != nil {
		t.Fatalf("retry under a live context: %v", err)
	}
	if got := e.dlq(1); string(got[0].Value) != "poison" {
		t.Fatalf("DLQ holds %q", got[0].Value)
	}
}
