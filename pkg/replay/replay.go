// Package replay moves a consumer group back in time on one topic, so the
// service behind the group processes history again (stackctl replay): for
// example, re-symbolizing old profiles once a stripped binary's debug info
// has arrived.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrGroupActive means the group has live members. Kafka refuses offset
// commits from outside a group that has members, and a member would
// overwrite the reset with its own next commit anyway.
var ErrGroupActive = errors.New("consumer group has active members")

// Options say what to replay.
type Options struct {
	Group string    // consumer group to move
	Topic string    // topic whose offsets are moved, on every partition
	From  time.Time // the group restarts at the first record at or after this time
	// Follow waits after the reset, printing the group's lag every
	// Interval, until the lag reaches zero or ctx ends.
	Follow   bool
	Interval time.Duration // default 5s
	// Force goes on although the group has live members: Kafka takes
	// offsets from outside a group only while it has no members, so Run
	// warns, waits up to ForceWait (default 5m) for the last member to
	// leave (its consumers stopped or scaled to zero), and commits the
	// reset at that moment, before a consumer rejoins.
	Force     bool
	ForceWait time.Duration
}

// Partition is the reset of one partition.
type Partition struct {
	Partition int32
	Old       int64 // committed offset before the reset; -1 when there was none
	New       int64 // committed offset after the reset
	End       int64 // end offset when the reset was made
}

// Summary is what a replay did.
type Summary struct {
	Group      string
	Topic      string
	From       time.Time
	Partitions []Partition
	Records    int64 // records from the new offsets to the end at reset time
	// With Follow:
	Remaining int64         // lag when Run returned (0 when caught up)
	Elapsed   time.Duration // from the reset until Run returned
}

// Run resets the committed offsets of opts.Group on every partition of
// opts.Topic to the first offset at or after opts.From, and prints each
// partition's old and new offset to progress. It refuses while the group
// has members: stop its consumers first. With opts.Follow it then prints
// the lag until it reaches zero (start the consumers again meanwhile).
func Run(ctx context.Context, cl *kgo.Client, adm *kadm.Client, opts Options, progress io.Writer) (Summary, error) {
	sum := Summary{Group: opts.Group, Topic: opts.Topic, From: opts.From}
	switch {
	case opts.Group == "":
		return sum, errors.New("replay: no group: name the consumer group to move (--group)")
	case opts.Topic == "":
		return sum, errors.New("replay: no topic: name the topic whose offsets move (--topic)")
	case opts.From.IsZero():
		return sum, errors.New("replay: no start time: give the time to replay from (--from)")
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if cl != nil {
		if err := cl.Ping(ctx); err != nil {
			return sum, fmt.Errorf("replay: reach kafka: %w", err)
		}
	}

	if opts.ForceWait <= 0 {
		opts.ForceWait = 5 * time.Minute
	}
	deadline := time.Now().Add(opts.ForceWait)
	if err := waitIdle(ctx, adm, opts, deadline, progress); err != nil {
		return sum, err
	}
	for {
		var err error
		sum, err = commitReset(ctx, adm, opts, sum)
		if !errors.Is(err, errMemberJoined) {
			if err != nil {
				return sum, err
			}
			break
		}
		if !opts.Force || !time.Now().Before(deadline) {
			return sum, fmt.Errorf("replay: %w: group %q: stop the group's consumers first, then run replay again, or give --force to wait for them to leave (%v)", ErrGroupActive, opts.Group, err)
		}
		// A consumer came back between the check and the commit.
		if err := waitIdle(ctx, adm, opts, deadline, progress); err != nil {
			return sum, err
		}
	}

	fmt.Fprintf(progress, "group %s, topic %s: reset to the first records at or after %s\n", opts.Group, opts.Topic, opts.From.UTC().Format(time.RFC3339))
	for _, p := range sum.Partitions {
		oldStr := "none"
		if p.Old >= 0 {
			oldStr = fmt.Sprint(p.Old)
		}
		fmt.Fprintf(progress, "  partition %d: %s -> %d (end %d, %d to process)\n", p.Partition, oldStr, p.New, p.End, max(p.End-p.New, 0))
	}
	fmt.Fprintf(progress, "committed: %d records to process again; start the group's consumers\n", sum.Records)
	if !opts.Follow {
		return sum, nil
	}

	d, err := Progress{Adm: adm, Topic: opts.Topic, Groups: []string{opts.Group}, Interval: opts.Interval, Out: progress}.Follow(ctx, 0)
	sum.Remaining, sum.Elapsed = d.Left, d.Elapsed
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(progress, "caught up: %d records replayed in %s%s\n", sum.Records, sum.Elapsed, rateETA(d.Processed, 0, d.Elapsed))
	return sum, nil
}

// errMemberJoined is a commit the broker refused because the group has
// members again.
var errMemberJoined = errors.New("a member joined the group")

// commitReset commits opts.Group's offsets on every partition of opts.Topic
// to the first record at or after opts.From, and returns sum with the moves.
func commitReset(ctx context.Context, adm *kadm.Client, opts Options, sum Summary) (Summary, error) {
	sum.Partitions, sum.Records = nil, 0
	starts, err := adm.ListOffsetsAfterMilli(ctx, opts.From.UnixMilli(), opts.Topic)
	if err != nil {
		return sum, fmt.Errorf("replay: list offsets of %s after %s: %w", opts.Topic, opts.From.Format(time.RFC3339), err)
	}
	if _, ok := starts[opts.Topic]; !ok || errors.Is(starts.Error(), kerr.UnknownTopicOrPartition) {
		return sum, fmt.Errorf("replay: topic %q does not exist: check --topic and STACKSTREAM_KAFKA_TOPIC_PREFIX", opts.Topic)
	}
	if err := starts.Error(); err != nil {
		return sum, fmt.Errorf("replay: list offsets of %s after %s: %w", opts.Topic, opts.From.Format(time.RFC3339), err)
	}
	ends, err := adm.ListEndOffsets(ctx, opts.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return sum, fmt.Errorf("replay: list end offsets of %s: %w", opts.Topic, err)
	}
	old, err := adm.FetchOffsetsForTopics(ctx, opts.Group, opts.Topic)
	if err == nil {
		err = old.Error()
	}
	if err != nil {
		return sum, fmt.Errorf("replay: fetch committed offsets of group %s: %w", opts.Group, err)
	}

	reset := kadm.Offsets{}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 {
			return
		}
		p := Partition{Partition: o.Partition, Old: -1, New: o.Offset}
		if c, ok := old.Lookup(opts.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			p.Old = c.At
		}
		if e, ok := ends.Lookup(opts.Topic, o.Partition); ok {
			p.End = e.Offset
		}
		sum.Partitions = append(sum.Partitions, p)
		sum.Records += max(p.End-p.New, 0)
		reset.Add(kadm.Offset{Topic: opts.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	sort.Slice(sum.Partitions, func(i, j int) bool { return sum.Partitions[i].Partition < sum.Partitions[j].Partition })

	// A member could have joined since the check; the commit then fails
	// with a generation or member error.
	resp, err := adm.CommitOffsets(ctx, opts.Group, reset)
	if err == nil {
		err = resp.Error()
	}
	if err == nil {
		return sum, nil
	}
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
		return sum, fmt.Errorf("%w: %w", errMemberJoined, err)
	}
	return sum, fmt.Errorf("replay: commit offsets of group %s: %w", opts.Group, err)
}

// rateETA describes the pace so far: records per second and, while records
// remain, when the group will have caught up at that pace.
func rateETA(done, left int64, elapsed time.Duration) string {
	if done <= 0 || elapsed <= 0 {
		return ""
	}
	rate := float64(done) / elapsed.Seconds()
	if left <= 0 {
		return fmt.Sprintf(", %.0f records/s", rate)
	}
	eta := time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second)
	return fmt.Sprintf(", %.0f records/s, ETA %s", rate, eta)
}

// waitIdle returns nil once the group has no members. Without opts.Force it
// does not wait; with it, it warns once and polls until deadline.
func waitIdle(ctx context.Context, adm *kadm.Client, opts Options, deadline time.Time, progress io.Writer) error {
	warned := false
	for {
		err := checkIdle(ctx, adm, opts.Group)
		if err == nil || !opts.Force || !errors.Is(err, ErrGroupActive) {
			return err
		}
		if !warned {
			fmt.Fprintf(progress, "WARNING: --force: %v\n", err)
			fmt.Fprintf(progress, "WARNING: Kafka takes offsets from outside a group only while it has no members: waiting up to %s for the last one to leave; stop or scale the group's consumers to zero now. The reset is committed the moment the group is empty; consumers started after that begin at the reset.\n", time.Until(deadline).Round(time.Second))
			warned = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay --force: gave up after %s: %w", opts.ForceWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func checkIdle(ctx context.Context, adm *kadm.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("replay: describe group %s: %w", group, err)
	}
	g, ok := described[group]
	if !ok {
		return nil
	}
	if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
		return fmt.Errorf("replay: describe group %s: %w", group, g.Err)
	}
	if len(g.Members) == 0 {
		return nil
	}
	var who []string
	for _, m := range g.Members {
		who = append(who, m.ClientID+"@"+m.ClientHost)
	}
	return fmt.Errorf("replay: %w: group %q is %s with %d member(s) (%s): stop the group's consumers first (for the symbolizer, every stackstream-symbolizer process), run replay, then start them again; or give --force to wait for them to leave",
		ErrGroupActive, group, g.State, len(g.Members), strings.Join(who, ", "))
}

// Positions are how far group has processed topic, by partition: the
// committed offset, or the offset in the commit's metadata after "next=" when
// that is further. The rollup commits an offset only once the windows of
// the records below it are evicted, which for hourly windows is hours
// behind, and records there (aggregate.Checkpoint) the next record it has
// handled and stored. Partitions without a commit are absent.
func Positions(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	committed, err := commits(ctx, adm, group, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic || o.Err != nil || o.At < 0 {
			return
		}
		out[o.Partition] = Position(o.At, o.Metadata)
	})
	return out, nil
}

// commits are group's commits on every partition of topic (At -1 where it
// has none).
func commits(ctx context.Context, adm *kadm.Client, group, topic string) (kadm.OffsetResponses, error) {
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets of %s: %w", group, err)
	}
	return committed, nil
}

// Position is how far a group has processed a partition whose commit is
// at with metadata: at, or the offset after "next=" in the metadata when
// that is further (Positions).
func Position(at int64, metadata string) int64 {
	if _, next, ok := strings.Cut(metadata, " next="); ok {
		// Fields may follow (" snap=…": the rollup's snapshot).
		next, _, _ = strings.Cut(next, " ")
		if n, err := strconv.ParseInt(next, 10, 64); err == nil && n > at {
			return n
		}
	}
	return at
}

// PartitionLag is a group's lag on one partition: the records from how far
// it got (reached) to end, never below 0, as a commit can be past an end
// listed before it. How far it got is the Position of its commit (at,
// metadata) or, without a commit (at < 0), start: the partition's first
// offset (0 when not known), every record there still to process. stackctl
// status and Progress both count a group's lag as the sum of these.
func PartitionLag(at int64, metadata string, start, end int64) (lag, reached int64) {
	reached = start
	if at >= 0 {
		reached = Position(at, metadata)
	}
	return max(end-reached, 0), reached
}

// groupLag is the group's total lag on topic over every partition
// (PartitionLag), and the sum of how far it got on each.
func groupLag(ctx context.Context, adm *kadm.Client, group, topic string) (lag, positionSum int64, err error) {
	committed, err := commits(ctx, adm, group, topic)
	if err != nil {
		return 0, 0, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list start offsets: %w", err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		at, metadata := int64(-1), ""
		if c, ok := committed.Lookup(topic, e.Partition); ok && c.Err == nil {
			at, metadata = c.At, c.Metadata
		}
		var start int64
		if s, ok := starts.Lookup(topic, e.Partition); ok {
			start = s.Offset
		}
		l, reached := PartitionLag(at, metadata, start, e.Offset)
		lag += l
		positionSum += reached
	})
	return lag, positionSum, nil
}
