package source

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// TestFollowerStartsBeforeItsTopic starts a follower while its topic is not
// in the broker's metadata yet, as happens for a moment after the topic is
// created. The follower must retry rather than stop: the runner waits for
// CaughtUp, so a follower that gave up would leave the instance in its
// consumer group holding partitions that nobody processes.
func TestFollowerStartsBeforeItsTopic(t *testing.T) {
	_, topic, cl, adm, infoCl := followerClients(t)
	store := NewTopic(1<<20, nil)
	f := &Follower{Client: infoCl, Admin: adm, Topic: topic, Store: store,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	select {
	case err := <-done:
		t.Fatalf("follower stopped while its topic was missing: %v", err)
	case <-f.CaughtUp():
		t.Fatal("caught up on a topic that does not exist")
	case <-time.After(time.Second):
	}

	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	sym, err := debuginfo.Encode(&debuginfo.File{
		BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x10, Name: "f"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("aa11"), Value: sym}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("follower stopped: %v", err)
	case <-f.CaughtUp():
	case <-time.After(time.Minute):
		t.Fatal("follower did not catch up within a minute of the topic's creation")
	}
	deadline := time.Now().Add(30 * time.Second)
	for store.Len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("store holds %d build ids, want 1", store.Len())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follower: %v", err)
	}
}

// TestFollowerGivesUpOnMissingTopic: past StartRetry the follower returns
// the error, so main's run group stops the instance (and it leaves its
// consumer group) instead of waiting forever without processing.
func TestFollowerGivesUpOnMissingTopic(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.Name(t, "sym-") + ".debuginfo"
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	infoCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(infoCl.Close)
	f := &Follower{Client: infoCl, Admin: kadm.NewClient(cl), Topic: topic, Store: NewTopic(1<<20, nil),
		Log: slog.New(slog.DiscardHandler), StartRetry: time.Second}
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("follower returned %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
		t.Logf("follower: %v", err)
	case <-f.CaughtUp():
		t.Fatal("caught up on a topic that does not exist")
	case <-time.After(time.Minute):
		t.Fatal("follower still retrying a minute after StartRetry of 1s")
	}
}

// TestWaitEndAfterTransaction: the debuginfo topic ends with a transaction
// marker, which is never a value. WaitEnd, as a miss calls it, still sees
// the follower reach the end (control records move its position), instead
// of waiting out its time.
func TestWaitEndAfterTransaction(t *testing.T) {
	brokers, topic, _, adm, infoCl := followerClients(t)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	store := NewTopic(1<<20, nil)
	f := &Follower{Client: infoCl, Admin: adm, Topic: topic, Store: store, Log: slog.New(slog.DiscardHandler)}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go f.Run(runCtx)
	select {
	case <-f.CaughtUp():
	case <-time.After(time.Minute):
		t.Fatal("follower did not start")
	}

	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(testenv.Name(t, "txn-")))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	sym, err := debuginfo.Encode(&debuginfo.File{BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Vaddr: 0x1000, Filesz: 0x1000}}, Symbols: []debuginfo.Symbol{{Addr: 0x1000, Size: 0x10, Name: "f"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("aa11"), Value: sym}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// The coordinator writes the marker after EndTransaction returns: wait
	// until the topic ends with it (value + marker = 2 offsets).
	for deadline := time.Now().Add(30 * time.Second); ; {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if total == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic holds %d offsets, want the value and its marker", total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := f.WaitEnd(waitCtx, time.Now()); err != nil {
		t.Fatalf("WaitEnd: %v (the follower never reached the marker that ends the topic)", err)
	}
	if _, err := store.Fetch(ctx, "aa11"); err != nil {
		t.Fatalf("value not applied when WaitEnd returned: %v", err)
	}
}

// followerClients names a topic for t, deleted when t ends, and returns the
// brokers, a client and an admin for the test, and the client a Follower
// reads the topic with: from its start, committed transactions only, control
// records kept (they move its position to the end).
func followerClients(t *testing.T) (brokers []string, topic string, cl *kgo.Client, adm *kadm.Client, infoCl *kgo.Client) {
	t.Helper()
	brokers = testenv.KafkaBrokers(t)
	topic = testenv.Name(t, "sym-") + ".debuginfo"
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm = kadm.NewClient(cl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteTopics(ctx, topic)
	})
	infoCl, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(infoCl.Close)
	return brokers, topic, cl, adm, infoCl
}
