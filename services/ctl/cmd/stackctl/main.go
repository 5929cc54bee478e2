// stackctl sets up and inspects a stackstream deployment: topics and index
// templates (init), the state of Kafka and OpenSearch (status), and replays
// of a consumer group from a point in time (replay), new index generations
// built from the topics and swapped in (reindex), and a simulated fleet
// of agents (loadgen).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
)

const usage = `usage: stackctl <command> [flags]

commands:
  init     create the Kafka topics and apply the OpenSearch index templates (idempotent)
  status   brokers, topics with partitions and group lag, OpenSearch health, indices
  replay   move a stopped consumer group back in time: stackctl replay -h
  reindex  build a new index generation from the topics and swap it in: stackctl reindex -h
  loadgen  simulate a fleet of agents publishing profiles: stackctl loadgen -h

Settings are STACKSTREAM_* environment variables (also read from ./.env);
stackctl -h lists them.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	config.Exit("stackctl", err)
}

// commandHelp is what `stackctl init -h` and `stackctl status -h` print.
var commandHelp = map[string]string{
	"init":   "Creates the Kafka topics and applies the OpenSearch index templates; idempotent.\n",
	"status": "Prints the brokers, the topics with their partitions and the groups' lag,\nOpenSearch's health and the indices.\n",
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Print(usage)
		var cfg ctl.Config
		config.Usage(&cfg, os.Stdout)
		return config.ErrHelp
	}
	cmd, rest := args[0], args[1:]
	if cmd == "replay" && (len(rest) == 0 || rest[0] == "-h" || rest[0] == "--help") {
		fmt.Print(replayUsage)
		return config.ErrHelp
	}
	if cmd == "reindex" && len(rest) > 0 && (rest[0] == "-h" || rest[0] == "--help") {
		fmt.Print(reindexUsage)
		return config.ErrHelp
	}
	if cmd == "init" || cmd == "status" {
		// They take no flags: a mistyped or help flag must not go on to
		// create topics and overwrite templates.
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "--help") {
			fmt.Printf("usage: stackctl %s\n\n%s\nSettings are STACKSTREAM_* environment variables: stackctl -h lists them.\n", cmd, commandHelp[cmd])
			return config.ErrHelp
		}
		if len(rest) > 0 {
			return fmt.Errorf("stackctl %s takes no arguments, got %q: settings are STACKSTREAM_* environment variables (stackctl -h)", cmd, rest)
		}
	}
	var cfg ctl.Config
	if err := config.Load(&cfg, nil, os.Stdout); err != nil {
		return err
	}
	switch cmd {
	case "init", "status":
		cl, err := kafka.NewClient(ctx, cfg.Kafka)
		if err != nil {
			return err
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
		if err != nil {
			return err
		}
		if cmd == "init" {
			return ctl.Init(ctx, cfg, adm, osc, os.Stdout)
		}
		return ctl.Status(ctx, cfg, adm, osc, os.Stdout)
	case "replay":
		return runReplay(ctx, cfg, rest)
	case "reindex":
		return runReindex(ctx, cfg, rest)
	case "loadgen":
		return runLoadgen(ctx, cfg, rest)
	default:
		return fmt.Errorf("unknown command %q: run stackctl -h", cmd)
	}
}
