package ctl

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestWaitPastMarkers: a group that consumed everything of a topic written in
// transactions (partition 0 committed, partition 1 ending in an aborted one)
// stays short of the end offsets by the markers; waitPast with the probe sees
// it is done, without the probe it waits on; and a data record the group has
// not consumed keeps it waiting, probe or not.
func TestWaitPastMarkers(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.Name(t, "markers-")
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	adm := kadm.NewClient(txn)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic) })
	produce := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(p int32) *kgo.Record { return &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")} }
	produce(kgo.TryCommit, rec(0), rec(0), rec(0), rec(1), rec(1))
	produce(kgo.TryAbort, rec(1), rec(1))

	group := topic + "-g"
	consume(t, brokers, topic, group, 5)

	ends := endOffsets(t, adm, topic)
	kc := kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second}
	probe := markersOnly(kc, topic)
	var out bytes.Buffer
	wait := func(probe markerProbe, d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return waitPast(ctx, adm, []string{group}, topic, ends, probe, 100*time.Millisecond, &out)
	}
	if err := wait(nil, 3*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without the probe: %v, want a wait that does not end (the group stays short by the markers; ends %v)", err, ends)
	}
	if err := wait(probe, time.Minute); err != nil {
		t.Fatalf("with the probe: %v\n%s", err, out.String())
	}

	// A committed data record after the group's position: not only markers.
	produce(kgo.TryCommit, rec(0))
	ends = endOffsets(t, adm, topic)
	if err := wait(probe, 3*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a record left to consume: %v, want the wait to go on", err)
	}
	consume(t, brokers, topic, group, 1)
	if err := wait(probe, time.Minute); err != nil {
		t.Fatalf("after consuming it: %v\n%s", err, out.String())
	}
}

// consume reads n records of topic in group as a committed reader and commits.
func consume(t *testing.T, brokers []string, topic, group string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", got, n, err)
		}
		got += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
}

// manualClient is a client producing to the partitions its records name,
// and its admin client, both closed when the test ends.
func manualClient(t *testing.T, brokers []string) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	listed, err := adm.ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends
}
