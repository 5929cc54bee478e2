// Package ktest has the Kafka helpers of the symbolizer's tests: topics
// under a unique prefix on the shared broker, and read-committed reads.
package ktest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// Topics creates the four topics under a unique prefix (deleted when the
// test ends) and returns them with a plain client.
func Topics(t testing.TB, brokers []string, partitions int32) (record.Topics, *kgo.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	topics := record.TopicsFor(testenv.Name(t, "sym-") + ".")
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, partitions, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteTopics(ctx, topics.All()...)
	})
	return topics, cl
}

// Consume reads topic from the start with read-committed isolation until it
// has want records or timeout passes, then keeps reading for linger so that
// duplicates would show.
func Consume(t testing.TB, brokers []string, topic string, want int, timeout, linger time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(timeout)
	lingering := false
	for time.Now().Before(deadline) {
		if len(out) >= want && !lingering {
			if linger == 0 {
				break
			}
			lingering, deadline = true, time.Now().Add(linger)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		f := cl.PollFetches(ctx)
		cancel()
		out = append(out, f.Records()...)
	}
	return out
}
