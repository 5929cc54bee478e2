package publish

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoDebuginfoTopic says the compacted debuginfo topic does not exist.
var ErrNoDebuginfoTopic = errors.New("debuginfo topic missing")

// KnownBuildIDs reads every key of the compacted debuginfo topic, from the
// start up to the end offsets seen when it began, so an agent restart does not
// republish what is already there. opts are the connection options.
func KnownBuildIDs(ctx context.Context, opts []kgo.Opt, topic string) (map[string]bool, error) {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	known := map[string]bool{}
	want := map[int32]int64{}
	var missing bool
	ends.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			missing = true
			return
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if err := ends.Error(); err != nil && !missing {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if missing || len(ends) == 0 {
		return nil, fmt.Errorf("%w: %s does not exist: run `stackctl init` first", ErrNoDebuginfoTopic, topic)
	}
	if len(want) == 0 {
		return known, nil
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	// Kafka cannot fetch keys alone: bound what is held at once to about one
	// large value (a record larger than the limit still comes, on its own).
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(start),
		kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(8<<20), kgo.MaxConcurrentFetches(1))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("read %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(r.Value) > 0 { // a tombstone deletes the key
				known[string(r.Key)] = true
			} else {
				delete(known, string(r.Key))
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return known, nil
}
