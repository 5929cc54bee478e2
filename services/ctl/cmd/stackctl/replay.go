package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/replay"
	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
)

const replayUsage = `usage: stackctl replay --group GROUP --from TIME [--topic TOPIC] [--follow] [--force [--force-wait D]]

Moves a stopped consumer group back to TIME on every partition of TOPIC, so
its service processes that history again on its next start: re-symbolize old
profiles after debug info arrived (group of the symbolizer, topic
profiles.raw), or rebuild indices and rollups (their groups, topic
profiles.symbolized). Stop the group's consumers first; with --follow, start
them again and watch the lag drain (records left, records/s, ETA).

Replay refuses while the group has live members: Kafka takes offsets from
outside a group only while it is empty. --force goes on anyway: it warns,
waits up to --force-wait (default 5m) for the last member to leave (stop or
scale the consumers to zero meanwhile) and commits the reset at that moment.
To rebuild indices while the consumers keep serving, use stackctl reindex.

TIME is RFC 3339 (2026-11-30T10:00:00Z) or relative to now (now-2h, -30m).
TOPIC is a full name or a name under STACKSTREAM_KAFKA_TOPIC_PREFIX
(default profiles.raw).
`

func runReplay(ctx context.Context, cfg ctl.Config, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	group := fs.String("group", "", "consumer group to move")
	topic := fs.String("topic", "profiles.raw", "topic whose offsets move")
	from := fs.String("from", "", "time to replay from")
	follow := fs.Bool("follow", false, "print the lag until the group caught up")
	force := fs.Bool("force", false, "wait for live members to leave instead of refusing")
	forceWait := fs.Duration("force-wait", 5*time.Minute, "how long --force waits")
	if err := fs.Parse(args); err != nil {
		fmt.Fprint(os.Stderr, replayUsage)
		return fmt.Errorf("replay: %w", err)
	}
	start, err := parseTime(*from, time.Now())
	if err != nil {
		return fmt.Errorf("replay: --from: %w", err)
	}
	name := *topic
	if !strings.HasPrefix(name, cfg.Kafka.TopicPrefix) {
		name = cfg.Kafka.TopicPrefix + name
	}
	cl, err := kafka.NewClient(ctx, cfg.Kafka)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Run prints each partition's move and, with --follow, the lag until done.
	_, err = replay.Run(ctx, cl, kadm.NewClient(cl), replay.Options{Group: *group, Topic: name, From: start, Follow: *follow, Force: *force, ForceWait: *forceWait}, os.Stdout)
	return err
}

// parseTime reads RFC 3339 or a time relative to now ("now-2h", "-30m", "now").
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("missing: give a time such as now-2h or 2026-11-30T10:00:00Z")
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	rel := strings.TrimPrefix(s, "now")
	if rel == "" {
		return now, nil
	}
	if d, err := time.ParseDuration(rel); err == nil && d <= 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q: use RFC 3339 or now-<duration> such as now-2h", s)
}
