package main

import (
	"io"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/pkg/config"
)

// TestConfigNamesBadVariable: a value of the shared blocks or of the
// indexer's own that cannot work stops start-up with the variable's name.
func TestConfigNamesBadVariable(t *testing.T) {
	var cfg Config
	if err := config.Load(&cfg, nil, io.Discard); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct{ key, value string }{
		{"STACKSTREAM_LOG_LEVEL", "loud"},
		{"STACKSTREAM_KAFKA_BROKERS", "localhost"},
		{"STACKSTREAM_OPENSEARCH_URL", "localhost:9200"},
		{"STACKSTREAM_OPENSEARCH_INDEX_SHARDS", "0"},
		{"STACKSTREAM_INDEXER_BATCH_BYTES", "10"},
		{"STACKSTREAM_INDEXER_WORKERS", "x"},
		{"STACKSTREAM_INDEXER_MAX_IN_FLIGHT", "0"},
		{"STACKSTREAM_INDEXER_MAX_IN_FLIGHT", "65"},
		{"STACKSTREAM_INDEXER_IN_FLIGHT_BYTES", "1024"},
		{"STACKSTREAM_INDEXER_STACK_CACHE_SIZE", "-1"},
		{"STACKSTREAM_OPENSEARCH_INDEX_GENERATION", "2"}, // with the live group
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			var cfg Config
			err := config.Load(&cfg, nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("%s=%s: Load = %v, want an error naming it", tt.key, tt.value, err)
			}
		})
	}
}
