package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
	"github.com/stackstream/stackstream/services/ctl/internal/loadgen"
)

const loadgenUsage = `usage: stackctl loadgen [flags]

Simulates a fleet of stackstream agents: every host publishes a raw CPU and
a memory profile per interval on profiles.raw (key and headers as the agent
sets them, gzip pprof), and the debuginfo of the binaries they name on the
debuginfo topic before the first profile naming them. Stacks come from a
corpus recorded by the agent, renamed per service and per deploy and varied
per host; native frames are addresses in simulated binaries (synthetic
build IDs), so the symbolizer names them as it does a real agent's. Topics
are those of STACKSTREAM_KAFKA_TOPIC_PREFIX (run stackctl init first).

With --speed above 1 the run fills the recent past faster than real time
(catch-up): --duration of simulated time ends at the wall clock.

flags:
`

func runLoadgen(ctx context.Context, cfg ctl.Config, args []string) error {
	lc, err := parseLoadgen(args, os.Stderr)
	if err != nil {
		return err
	}
	corpus, err := loadgen.LoadCorpus()
	if err != nil {
		return err
	}
	topics := cfg.Kafka.Topics()
	cl, err := kafka.NewClient(ctx, cfg.Kafka,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // values are gzip, as the agent's
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == topics.Debuginfo {
				return kafka.DebuginfoMaxMessageBytes
			}
			return 1_000_012
		}),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = loadgen.Run(ctx, lc, corpus, cl, topics, time.Now, os.Stdout)
	return err
}

// parseLoadgen reads the flags into a validated loadgen.Config.
func parseLoadgen(args []string, usageOut io.Writer) (loadgen.Config, error) {
	c := loadgen.DefaultConfig()
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.Usage = func() {
		fmt.Fprint(usageOut, loadgenUsage)
		fs.PrintDefaults()
	}
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, fmt.Sprintf("simulated hosts (1..%d)", loadgen.MaxHosts))
	fs.IntVar(&c.Cores, "cores", c.Cores, "CPUs per host")
	fs.IntVar(&c.Rate, "rate", c.Rate, "samples per second per CPU (Hz), as the agent's STACKSTREAM_AGENT_FREQUENCY")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "profile interval (whole seconds)")
	fs.Float64Var(&c.Busy, "busy", c.Busy, "share of each host's CPU time running, in (0, 1]: raw samples per profile = cores x rate x interval x busy")
	fs.IntVar(&c.Services, "services", c.Services, "services (one process each) per host")
	fs.IntVar(&c.Replicas, "replicas", c.Replicas, "hosts that run the same service (the fleet runs hosts x services / replicas services)")
	fs.Float64Var(&c.Churn, "churn", c.Churn, "process restarts per host per minute (new pid and pod)")
	fs.Float64Var(&c.BinariesPerHour, "binaries-per-hour", c.BinariesPerHour, "new service binaries (deploys, each a new build ID with its debuginfo) per hour, fleet-wide")
	fs.IntVar(&c.LabelValues, "label-values", c.LabelValues, "label cardinality: distinct k8s_pod values per service")
	fs.Float64Var(&c.Mutate, "mutate", c.Mutate, "share of samples whose stack a host varies (a frame repeated)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "simulated time to cover")
	fs.Float64Var(&c.Speed, "speed", c.Speed, "simulated seconds per second (above 1: catch-up of the recent past)")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "same seed and flags, same profiles")
	fs.StringVar(&c.HostPrefix, "host-prefix", c.HostPrefix, "host IDs are this plus h000000, h000001, ...")
	fs.StringVar(&c.AgentVersion, "agent-version", c.AgentVersion, "value of the agent version header")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, config.ErrHelp
		}
		return c, fmt.Errorf("loadgen: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("loadgen: unexpected argument %q: every setting is a flag (stackctl loadgen -h)", fs.Arg(0))
	}
	return c, c.Validate()
}
