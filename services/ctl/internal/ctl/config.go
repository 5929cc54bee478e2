// Package ctl implements stackctl's commands: init (topics and index
// templates), status, and replay wiring.
package ctl

import (
	"fmt"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
)

// Config is stackctl's settings.
type Config struct {
	Kafka       kafka.Config           `envconfig:"KAFKA"`
	OpenSearch  opensearch.Config      `envconfig:"OPENSEARCH"`
	Index       opensearch.IndexConfig `envconfig:"OPENSEARCH_INDEX"`
	Partitions  int32                  `envconfig:"CTL_PARTITIONS" default:"6" desc:"partitions of each topic stackctl init creates"`
	Replication int16                  `envconfig:"CTL_REPLICATION" default:"1" desc:"replication factor of each topic stackctl init creates"`
}

// Validate checks the settings stackctl uses.
func (c *Config) Validate() error {
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	if err := c.OpenSearch.Validate(); err != nil {
		return err
	}
	if c.Partitions < 1 {
		return fmt.Errorf("STACKSTREAM_CTL_PARTITIONS=%d must be at least 1", c.Partitions)
	}
	if c.Replication < 1 {
		return fmt.Errorf("STACKSTREAM_CTL_REPLICATION=%d must be at least 1", c.Replication)
	}
	return nil
}
