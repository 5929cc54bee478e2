package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
)

const reindexUsage = `usage: stackctl reindex [--run [--bin-dir DIR]] [--delete-old] [--from TIME] [--max-left N]
                        [--indexer-group GROUP] [--rollup-group GROUP]

Builds a new index generation (stacks, samples, rollups) from the topic
profiles.symbolized with temporary consumer groups while the live consumers
keep serving, then, once the temporary groups have at most N records left,
points every index name to it in one atomic request. Readers and the live
writers move together; the temporary consumers index what they have left
and stop. See docs/STACKCTL.md.

  --run            start the temporary indexer and rollup as child processes
                   (stackstream-indexer, stackstream-rollup from --bin-dir or
                   PATH) and stop them at the end; without it stackctl prints
                   the variables to start them with and waits
  --delete-old     delete the old generation's indices after the swap;
                   required to migrate from generation 0, whose indices the
                   swap itself deletes
  --from TIME      the temporary groups start at the first record at or after
                   TIME (RFC 3339 or now-<duration>); default: the topic's start
  --max-left N     swap when the temporary groups have N records left or
                   fewer (default 0)
  --indexer-group, --rollup-group
                   the live groups (defaults stackstream-indexer,
                   stackstream-rollup); "" leaves that service's indices on
                   their generation
  --interval D     progress every D (default 5s)
`

func runReindex(ctx context.Context, cfg ctl.Config, args []string) error {
	fs := flag.NewFlagSet("reindex", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := ctl.ReindexOptions{}
	fs.BoolVar(&opts.Run, "run", false, "")
	binDir := fs.String("bin-dir", "", "")
	fs.BoolVar(&opts.DeleteOld, "delete-old", false, "")
	from := fs.String("from", "", "")
	fs.Int64Var(&opts.MaxLeft, "max-left", 0, "")
	fs.StringVar(&opts.IndexerGroup, "indexer-group", "stackstream-indexer", "")
	fs.StringVar(&opts.RollupGroup, "rollup-group", "stackstream-rollup", "")
	fs.DurationVar(&opts.Interval, "interval", 5*time.Second, "")
	if err := fs.Parse(args); err != nil {
		fmt.Fprint(os.Stderr, reindexUsage)
		return fmt.Errorf("reindex: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("reindex: unexpected argument %q: run stackctl reindex -h", fs.Arg(0))
	}
	if *from != "" {
		t, err := parseTime(*from, time.Now())
		if err != nil {
			return fmt.Errorf("reindex: --from: %w", err)
		}
		opts.From = t
	}
	if opts.MaxLeft < 0 {
		return fmt.Errorf("reindex: --max-left=%d must be 0 or more", opts.MaxLeft)
	}
	if opts.Interval <= 0 {
		return fmt.Errorf("reindex: --interval=%s must be positive", opts.Interval)
	}
	if opts.Run {
		opts.Starter = execStarter(*binDir)
	}
	cl, err := kafka.NewClient(ctx, cfg.Kafka)
	if err != nil {
		return err
	}
	defer cl.Close()
	osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	_, err = ctl.Reindex(ctx, cfg, kadm.NewClient(cl), osc, opts, os.Stdout)
	return err
}

// execStarter runs stackstream-<service> from dir (or PATH when dir is
// empty) with stackctl's environment plus env, its output on stderr.
func execStarter(dir string) ctl.Starter {
	return func(ctx context.Context, service string, env []string) (func() error, <-chan struct{}, func() error, error) {
		bin := "stackstream-" + service
		if dir != "" {
			bin = filepath.Join(dir, bin)
		} else if p, err := exec.LookPath(bin); err == nil {
			bin = p
		} else {
			return nil, nil, nil, fmt.Errorf("%s is not on PATH: give --bin-dir", bin)
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, nil, err
		}
		done := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(done) }()
		stop := func() error {
			select {
			case <-done:
				return nil
			default:
			}
			// The services write and commit what they hold on SIGTERM.
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				return err
			}
			select {
			case <-done:
				return nil
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-done
				return fmt.Errorf("%s did not stop within 2m of SIGTERM: killed", bin)
			}
		}
		return stop, done, func() error { return waitErr }, nil
	}
}
