package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
)

// Init creates the topics and applies the index templates. It is idempotent:
// a second run reports everything as existing or unchanged.
func Init(ctx context.Context, cfg Config, adm *kadm.Client, os *opensearchapi.Client, out io.Writer) error {
	topics, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(cfg.Kafka.Topics(), cfg.Partitions, cfg.Replication))
	for _, t := range topics {
		state := "exists"
		if t.Created {
			state = "created"
		}
		fmt.Fprintf(out, "topic     %-40s %s\n", t.Name, state)
	}
	if err != nil {
		return err
	}
	tpls, err := opensearch.ApplyTemplates(ctx, os, cfg.Index.Prefix, cfg.Index.Settings())
	for _, t := range tpls {
		fmt.Fprintf(out, "template  %-40s %s\n", t.Name, t.Action)
	}
	return err
}
