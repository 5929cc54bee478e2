package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

func testConfig(brokers []string, prefix string) Config {
	return Config{Brokers: brokers, TopicPrefix: prefix, DialTimeout: 5 * time.Second}
}

// TestRoundTrip sends records through the real broker with an idempotent
// producer and reads them back in a consumer group that commits, then checks
// a second member of the group starts after the committed offsets.
func TestRoundTrip(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := testConfig(brokers, testenv.Name(t, "t-")+".")
	topics := cfg.Topics()

	admCl, err := NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	res, err := EnsureTopics(ctx, adm, Specs(topics, 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.Created {
			t.Fatalf("topic %s not created", r.Name)
		}
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topics.All()...) })

	// Idempotence and acks=all are franz-go's defaults; ask for them anyway so
	// a default change cannot weaken the contract.
	prod, err := NewClient(ctx, cfg, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topics.ProfilesRaw))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 50
	for i := 0; i < n; i++ {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("host-%d", i%5)), Value: []byte(fmt.Sprintf("v%d", i)),
			Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers()}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}

	group := testenv.Name(t, "g-")
	consume := func(limit int) []*kgo.Record {
		cl, err := NewClient(ctx, cfg, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics.ProfilesRaw),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var got []*kgo.Record
		pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
		defer pcancel()
		for len(got) < limit {
			fs := cl.PollFetches(pctx)
			if pctx.Err() != nil {
				break
			}
			if err := fs.Err(); err != nil {
				t.Fatalf("poll: %v", err)
			}
			got = append(got, fs.Records()...)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		return got
	}
	first := consume(n)
	if len(first) != n {
		t.Fatalf("consumed %d records, want %d", len(first), n)
	}
	if _, err := record.ParseMeta(first[0].Headers); err != nil {
		t.Fatalf("headers: %v", err)
	}
	lags, err := adm.Lag(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if total := lags[group].Lag.Total(); total != 0 {
		t.Fatalf("lag after commit = %d, want 0", total)
	}
}

func TestUnreachableBroker(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:1"}, "x.")
	cfg.DialTimeout = 2 * time.Second
	_, err := NewClient(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_KAFKA_BROKERS=127.0.0.1:1") {
		t.Fatalf("NewClient error = %v, want one naming STACKSTREAM_KAFKA_BROKERS", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no port", Config{Brokers: []string{"localhost"}}, "lacks a port"},
		{"empty", Config{}, "STACKSTREAM_KAFKA_BROKERS is empty"},
		{"bad sasl", Config{Brokers: []string{"a:1"}, SASLMechanism: "GSSAPI"}, "STACKSTREAM_KAFKA_SASL_MECHANISM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	ok := Config{Brokers: []string{"a:1"}, SASLMechanism: "scram-sha-512", SASLUsername: "u", SASLPassword: "p"}
	if _, err := ok.Opts(); err != nil {
		t.Fatalf("Opts: %v", err)
	}
}
