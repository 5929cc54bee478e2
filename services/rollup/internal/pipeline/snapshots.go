package pipeline

// Snapshots of the partitions' state (docs/ROLLUP.md, "Snapshots"): the
// commit of a partition trails its newest record by up to an hour and a
// quarter (its hour window holds every record of the hour), so a restarted
// or rebalanced instance read all of that again. Every Snapshots.Every, and
// on shutdown and revoke, each partition's state (aggregate.Partition.
// Snapshot) is produced to the same partition of the group's state topic
// in chunks, and the commit's metadata names it. The next owner restores
// it and reads on from the offset after the snapshot; when the snapshot
// cannot be read (deleted, corrupt, over the state budget) it reads again
// from the committed offset as before, which stays the safe one.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// Snapshots stores partition state in a topic of its own.
type Snapshots struct {
	// Topic has a partition for each partition of profiles.symbolized
	// (EnsureTopic); one rollup group's.
	Topic string
	// Every is how often a partition's state is snapshotted at a commit.
	Every time.Duration
	// NewClient makes a Kafka client with the service's connection
	// settings and opts.
	NewClient func(opts ...kgo.Opt) (*kgo.Client, error)
	// LoadTimeout bounds the read of one snapshot; 0 means a minute.
	LoadTimeout time.Duration

	producer *kgo.Client
	last     map[int32]time.Time
}

// snapshotChunkBytes is the value size of a snapshot's records, under
// Kafka's default message size with room for the batch.
const snapshotChunkBytes = 900 << 10

// snapRef names a snapshot in commit metadata: its first record's offset
// in the state topic's partition, its chunks, and the source offset it
// goes on from.
type snapRef struct {
	offset int64
	chunks int
	at     int64
	// built is the partition's DocumentsBuilt when the snapshot was
	// taken in this process (0 for a reference read from a commit: a
	// restored partition has built none). A snapshot at the partition's
	// offset is taken again once documents were built since: writing
	// them marked them stored, which the snapshot does not know.
	built int64
}

// stale says whether p's state differs from the snapshot s: records
// read since, or documents written since (until 2026-12-03 only the
// offset was compared, so the snapshot a hand-over passed on could hold
// windows written at an idle flush after it as still to write, and their
// next owner wrote them all again: part E of the pipeline bench).
func (s snapRef) stale(p *aggregate.Partition) bool {
	return s.at != p.SnapshotAt() || s.built != p.DocumentsBuilt()
}

func (s snapRef) String() string {
	return fmt.Sprintf(" snap=%d+%d@%d", s.offset, s.chunks, s.at)
}

// parseSnapRef reads the snapshot named in commit metadata, if any.
func parseSnapRef(meta string) (snapRef, bool) {
	i := strings.Index(meta, " snap=")
	if i < 0 {
		return snapRef{}, false
	}
	var s snapRef
	if _, err := fmt.Sscanf(meta[i:], " snap=%d+%d@%d", &s.offset, &s.chunks, &s.at); err != nil || s.offset < 0 || s.chunks <= 0 || s.at < 0 {
		return snapRef{}, false
	}
	return s, true
}

// EnsureTopic creates the state topic with as many partitions as the
// source topic when it does not exist: deleting records below a partition's
// newest snapshot keeps its disk to about one snapshot.
func (s *Snapshots) EnsureTopic(ctx context.Context, adm *kadm.Client, source string) error {
	td, err := adm.ListTopics(ctx, source)
	if err != nil {
		return fmt.Errorf("list %s: %w", source, err)
	}
	d, ok := td[source]
	if !ok || d.Err != nil {
		return fmt.Errorf("topic %s is missing: run stackctl init", source)
	}
	retention := strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10)
	resp, err := adm.CreateTopic(ctx, int32(len(d.Partitions)), -1, map[string]*string{"retention.ms": &retention}, s.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create state topic %s: %w", s.Topic, err)
	}
	return nil
}

// due says whether partition p's state is to be snapshotted now.
func (s *Snapshots) due(p int32, now time.Time, final bool) bool {
	return final || now.Sub(s.last[p]) >= s.Every
}

// save produces a snapshot of partition p, which goes on from source
// offset at, and returns its reference.
func (s *Snapshots) save(ctx context.Context, p int32, data []byte, at int64, now time.Time) (snapRef, error) {
	if s.producer == nil {
		cl, err := s.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
		if err != nil {
			return snapRef{}, fmt.Errorf("state topic client: %w", err)
		}
		s.producer, s.last = cl, map[int32]time.Time{}
	}
	chunks := (len(data) + snapshotChunkBytes - 1) / snapshotChunkBytes
	id := []byte(strconv.FormatInt(at, 10) + "/" + strconv.FormatInt(now.UnixNano(), 10))
	recs := make([]*kgo.Record, 0, chunks)
	for i := 0; i < len(data); i += snapshotChunkBytes {
		recs = append(recs, &kgo.Record{Topic: s.Topic, Partition: p, Key: id, Value: data[i:min(i+snapshotChunkBytes, len(data))]})
	}
	if err := s.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return snapRef{}, fmt.Errorf("produce snapshot of partition %d to %s: %w", p, s.Topic, err)
	}
	s.last[p] = now
	return snapRef{offset: recs[0].Offset, chunks: chunks, at: at}, nil
}

// trim deletes the records of partition p below ref, older snapshots,
// once a commit names ref.
func (s *Snapshots) trim(ctx context.Context, p int32, ref snapRef) error {
	if s.producer == nil {
		return nil
	}
	resp, err := kadm.NewClient(s.producer).DeleteRecords(ctx, kadm.Offsets{s.Topic: {p: {At: ref.offset}}})
	if err != nil {
		return err
	}
	return resp.Error()
}

// load reads the snapshots refs names back (by partition) with one client
// reading their partitions at once: a snapshot's chunks are the records of
// its key from its offset on. A partition whose snapshot cannot be read
// has its error in errs instead of its data.
func (s *Snapshots) load(ctx context.Context, refs map[int32]snapRef) (data map[int32][]byte, errs map[int32]error) {
	data, errs = map[int32][]byte{}, map[int32]error{}
	if len(refs) == 0 {
		return data, errs
	}
	timeout := s.LoadTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	failAll := func(err error) (map[int32][]byte, map[int32]error) {
		for p := range refs {
			errs[p] = err
		}
		return data, errs
	}
	at := map[int32]kgo.Offset{}
	for p, ref := range refs {
		at[p] = kgo.NewOffset().At(ref.offset)
	}
	cl, err := s.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.Topic: at}), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return failAll(fmt.Errorf("state topic client: %w", err))
	}
	defer cl.Close()
	// Deleted (a newer one committed elsewhere, retention), or never
	// there: said at once, not after the timeout.
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, s.Topic)
	if err == nil {
		err = starts.Error()
	}
	ends, eerr := adm.ListEndOffsets(ctx, s.Topic)
	if err = errors.Join(err, eerr); err == nil {
		err = ends.Error()
	}
	if err != nil {
		return failAll(fmt.Errorf("offsets of %s: %w", s.Topic, err))
	}
	type reading struct {
		ref  snapRef
		key  []byte
		got  int
		data []byte
	}
	left := map[int32]*reading{}
	var gone []int32
	for p, ref := range refs {
		first, _ := starts.Lookup(s.Topic, p)
		end, _ := ends.Lookup(s.Topic, p)
		if first.Offset > ref.offset || end.Offset < ref.offset+int64(ref.chunks) {
			errs[p] = fmt.Errorf("snapshot %d+%d of partition %d is gone: %s holds offsets %d to %d", ref.offset, ref.chunks, p, s.Topic, first.Offset, end.Offset)
			gone = append(gone, p)
			continue
		}
		left[p] = &reading{ref: ref}
	}
	if len(gone) > 0 {
		cl.RemoveConsumePartitions(map[string][]int32{s.Topic: gone})
	}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			for p, r := range left {
				errs[p] = fmt.Errorf("read snapshot %d+%d of partition %d: %d of its chunks after %s", r.ref.offset, r.ref.chunks, p, r.got, timeout)
			}
			break
		}
		fs.EachError(func(_ string, p int32, err error) {
			if left[p] != nil {
				errs[p] = fmt.Errorf("read snapshot of partition %d: %w", p, err)
				delete(left, p)
			}
		})
		fs.EachPartition(func(ft kgo.FetchTopicPartition) {
			p := ft.Partition
			r := left[p]
			if r == nil {
				return
			}
			for _, rec := range ft.Records {
				if r.got == 0 {
					if rec.Offset != r.ref.offset {
						errs[p] = fmt.Errorf("snapshot %d of partition %d is gone (first record %d)", r.ref.offset, p, rec.Offset)
						delete(left, p)
						return
					}
					r.key = rec.Key
				}
				if string(rec.Key) != string(r.key) || r.got == r.ref.chunks {
					continue // another snapshot's record
				}
				r.data = append(r.data, rec.Value...)
				r.got++
			}
			if r.got == r.ref.chunks {
				data[p] = r.data
				delete(left, p)
			}
		})
	}
	return data, errs
}

// Close closes the producer.
func (s *Snapshots) Close() {
	if s.producer != nil {
		s.producer.Close()
	}
}
