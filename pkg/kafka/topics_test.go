package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// topicsClient is a client of the real broker under a topic prefix of the
// test's own, and a context ending with the test.
func topicsClient(t *testing.T) (context.Context, Config, *kgo.Client) {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cfg := testConfig(brokers, testenv.Name(t, "t-")+".")
	cl, err := NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return ctx, cfg, cl
}

// TestCheckTopics asks the real broker: every topic missing, then only the
// one not created.
func TestCheckTopics(t *testing.T) {
	ctx, cfg, cl := topicsClient(t)
	topics := cfg.Topics()

	err := CheckTopics(ctx, cl, topics.ProfilesSymbolized, topics.DLQ)
	want := "kafka topic " + topics.ProfilesSymbolized + " is missing: run stackctl init (or check STACKSTREAM_KAFKA_TOPIC_PREFIX); so is " + topics.DLQ
	if err == nil || err.Error() != want {
		t.Fatalf("CheckTopics before init = %v, want %q", err, want)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topics.ProfilesSymbolized); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topics.All()...) })
	// The broker's metadata names a new topic a moment after it is created.
	for range 100 {
		if err = CheckTopics(ctx, cl, topics.ProfilesSymbolized, topics.DLQ); err == nil || !strings.Contains(err.Error(), "; so is") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want = "kafka topic " + topics.DLQ + " is missing: run stackctl init (or check STACKSTREAM_KAFKA_TOPIC_PREFIX)"
	if err == nil || err.Error() != want {
		t.Fatalf("CheckTopics = %v, want %q", err, want)
	}
	if err := CheckTopics(ctx, cl, topics.ProfilesSymbolized); err != nil {
		t.Fatalf("CheckTopics of an existing topic = %v", err)
	}
}

// TestEnsureTopicsListed: the topics EnsureTopics created are listed, with
// their partitions' leaders, as soon as it returns, so a service started
// right after stackctl init finds them (it once stopped on a topic the
// controller had created and the broker did not list yet).
func TestEnsureTopicsListed(t *testing.T) {
	ctx, cfg, cl := topicsClient(t)
	topics := cfg.Topics()
	adm := kadm.NewClient(cl)
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topics.All()...) })
	res, err := EnsureTopics(ctx, adm, Specs(topics, 8, 1))
	if err != nil || len(res) != 4 || !res[0].Created {
		t.Fatalf("EnsureTopics = %v, %v", res, err)
	}
	// A new client, as a service starting: no retry.
	other, err := NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := CheckTopics(ctx, other, topics.All()...); err != nil {
		t.Fatalf("CheckTopics right after EnsureTopics: %v", err)
	}
	if res, err := EnsureTopics(ctx, adm, Specs(topics, 8, 1)); err != nil || res[0].Created {
		t.Fatalf("EnsureTopics again = %v, %v; want every topic existing", res, err)
	}
}
