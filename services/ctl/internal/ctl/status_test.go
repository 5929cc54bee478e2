package ctl

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// TestGroupLags: stackctl status counts a group's lag from how far it got
// (a rollup's next= past its commit) and, on an assigned partition without a
// commit, from the partition's start (retention deleted 3 records of
// partition 2).
func TestGroupLags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := testenv.KafkaBrokers(t)
	cl, adm := manualClient(t, brokers)
	topic, committed, live := testenv.Name(t, "lag-"), testenv.Name(t, "lag-committed-"), testenv.Name(t, "lag-live-")
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		adm.DeleteGroups(context.Background(), committed, live)
		adm.DeleteTopics(context.Background(), topic)
	})
	var recs []*kgo.Record
	for p := int32(0); p < 3; p++ {
		for range 10 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: topic, Partition: 2, At: 3})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v, %v", err, resp.Error())
	}

	// committed has no member: partition 0 committed at 4, partition 1 at 2
	// with the rollup's next=9, partition 2 never (from its start): 6 + 1 + 7.
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4, LeaderEpoch: -1})
	os.Add(kadm.Offset{Topic: topic, Partition: 1, At: 2, LeaderEpoch: -1, Metadata: "rollup/v1 wm=5 floor=1 next=9 snap=0+3@9"})
	if _, err := adm.CommitOffsets(ctx, committed, os); err != nil {
		t.Fatal(err)
	}

	// live has a member assigned every partition and no commit: 10 + 10 + 7.
	member, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(live), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	for {
		pollCtx, pollCancel := context.WithTimeout(ctx, time.Second)
		member.PollFetches(pollCtx)
		pollCancel()
		gs, err := adm.DescribeGroups(ctx, live)
		g := gs[live]
		if err == nil && g.State == "Stable" && len(g.AssignedPartitions()[topic]) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("group %s never had its member assigned the topic's 3 partitions: %v", live, gs)
		}
	}

	got := groupLags(ctx, adm)[topic]
	if want := committed + "=14 " + live + "=27"; got != want {
		t.Fatalf("lag of %s: %q, want %q", topic, got, want)
	}
}
