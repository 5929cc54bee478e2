package ctl

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
)

// markerProbe says whether offsets [from, to) of a partition hold nothing a
// consumer is given: only transaction markers (and aborted records). A group
// never commits past the marker that ends a partition written in transactions
// (the symbolizer's), so on an idle topic it stays short of the end offset.
type markerProbe func(ctx context.Context, partition int32, from, to int64) (bool, error)

// markersOnly reads [from, to) of topic's partition as a committed reader
// would, control records kept, and reports whether none of them is data.
func markersOnly(kc kafka.Config, topic string) markerProbe {
	return func(ctx context.Context, partition int32, from, to int64) (bool, error) {
		if from >= to {
			return true, nil
		}
		cl, err := kafka.NewClient(ctx, kc,
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
		)
		if err != nil {
			return false, err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("read %s[%d] from %d to %d: %w", topic, partition, from, to, err)
			}
			if err := fs.Err(); err != nil {
				return false, fmt.Errorf("read %s[%d] from %d: %w", topic, partition, from, err)
			}
			last := int64(-1)
			data := false
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset < to && !r.Attrs.IsControl() {
					data = true
				}
				last = max(last, r.Offset)
			})
			if data {
				return false, nil
			}
			// Aborted records are dropped, but their transaction's marker
			// follows them, so the last offset below to is always returned.
			if last >= to-1 {
				return true, nil
			}
		}
	}
}
