package kafka

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

	"github.com/stackstream/stackstream/schemas/record"
)

// TopicSpec describes a topic stackctl creates.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]*string
}

// DebuginfoMaxMessageBytes lets a debuginfo value up to the schema's bound
// through, with room for headers.
const DebuginfoMaxMessageBytes = 16 << 20

// Specs returns the four topics of the contract.
func Specs(t record.Topics, partitions int32, replication int16) []TopicSpec {
	str := func(s string) *string { return &s }
	return []TopicSpec{
		{Name: t.ProfilesRaw, Partitions: partitions, ReplicationFactor: replication},
		{Name: t.ProfilesSymbolized, Partitions: partitions, ReplicationFactor: replication},
		{Name: t.Debuginfo, Partitions: partitions, ReplicationFactor: replication, Configs: map[string]*string{
			"cleanup.policy":    str("compact"),
			"max.message.bytes": str(strconv.Itoa(DebuginfoMaxMessageBytes)),
		}},
		{Name: t.DLQ, Partitions: partitions, ReplicationFactor: replication},
	}
}

// TopicResult says what EnsureTopics did with one topic.
type TopicResult struct {
	Name    string
	Created bool
}

// EnsureTopics creates the topics that do not exist yet; existing ones are
// left as they are, so it is safe to run any number of times.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec) ([]TopicResult, error) {
	out := make([]TopicResult, 0, len(specs))
	for _, s := range specs {
		resp, err := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, s.Configs, s.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			out = append(out, TopicResult{Name: s.Name, Created: true})
		case errors.Is(err, kerr.TopicAlreadyExists):
			out = append(out, TopicResult{Name: s.Name})
		default:
			return out, fmt.Errorf("create topic %s: %w", s.Name, err)
		}
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return out, waitListed(ctx, adm, names)
}

// listedWithin bounds EnsureTopics' wait for the broker to list the topics
// it created.
const listedWithin = 30 * time.Second

// waitListed waits until the broker's metadata lists every topic with a
// leader for each partition. The controller answers CreateTopics before
// the brokers' metadata has the topic, and a service started right after
// stackctl init would stop on it (CheckTopics: seen in the issue-15 bench
// against a broker just started).
func waitListed(ctx context.Context, adm *kadm.Client, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, listedWithin)
	defer cancel()
	for {
		listed, err := adm.ListTopics(ctx, names...)
		missing := unled(listed, names)
		if err == nil && missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%s has no leader in the broker's metadata", missing)
			}
			return fmt.Errorf("topics created but not ready within %v: %w", listedWithin, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unled is the first of names that is not listed, or has a partition
// without a leader; "" when none.
func unled(listed kadm.TopicDetails, names []string) string {
	for _, n := range names {
		d, ok := listed[n]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return n
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return n
			}
		}
	}
	return ""
}

// CheckTopics stops start-up with one line naming the topics that do not
// exist: a consumer would otherwise wait for them silently, and a producer
// stall on its first record.
func CheckTopics(ctx context.Context, cl *kgo.Client, topics ...string) error {
	listed, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	var missing []string
	for _, t := range topics {
		if d, ok := listed[t]; !ok || d.Err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err = fmt.Errorf("kafka topic %s is missing: run stackctl init (or check STACKSTREAM_KAFKA_TOPIC_PREFIX)", missing[0])
	if len(missing) > 1 {
		err = fmt.Errorf("%w; so is %s", err, strings.Join(missing[1:], ", "))
	}
	return err
}
