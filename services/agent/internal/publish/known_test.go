package publish

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

func TestKnownBuildIDs(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	topics := record.TopicsFor(testenv.Name(t, "agent-") + ".")

	if _, err := KnownBuildIDs(ctx, opts, topics.Debuginfo); !errors.Is(err, ErrNoDebuginfoTopic) {
		t.Fatalf("missing topic: err = %v, want ErrNoDebuginfoTopic", err)
	}

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 2, 1)); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topics.All()...)

	known, err := KnownBuildIDs(ctx, opts, topics.Debuginfo)
	if err != nil || len(known) != 0 {
		t.Fatalf("empty topic: %v, %v", known, err)
	}
	recs := []*kgo.Record{
		{Topic: topics.Debuginfo, Key: []byte("aa"), Value: []byte("x")},
		{Topic: topics.Debuginfo, Key: []byte("bb"), Value: []byte("x")},
		{Topic: topics.Debuginfo, Key: []byte("cc"), Value: []byte("x")},
		{Topic: topics.Debuginfo, Key: []byte("cc")}, // tombstone
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	known, err = KnownBuildIDs(ctx, opts, topics.Debuginfo)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) != 2 || !known["aa"] || !known["bb"] {
		t.Fatalf("known = %v, want aa and bb", known)
	}
}
