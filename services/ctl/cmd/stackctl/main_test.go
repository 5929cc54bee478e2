package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/pkg/config"
)

// TestInitStatusArguments: init and status print their help on -h and
// refuse any other argument, before reading the settings or connecting to
// anything (the brokers below do not exist), so `stackctl init -h` never
// creates topics or overwrites templates.
func TestInitStatusArguments(t *testing.T) {
	t.Setenv("STACKSTREAM_KAFKA_BROKERS", "127.0.0.1:1")
	t.Setenv("STACKSTREAM_OPENSEARCH_URL", "http://127.0.0.1:1")
	for _, cmd := range []string{"init", "status"} {
		for _, help := range []string{"-h", "--help"} {
			if err := run(context.Background(), []string{cmd, help}); !errors.Is(err, config.ErrHelp) {
				t.Errorf("stackctl %s %s: %v, want the help", cmd, help, err)
			}
		}
		err := run(context.Background(), []string{cmd, "--prefix", "x"})
		if err == nil || !strings.Contains(err.Error(), "takes no arguments") || !strings.Contains(err.Error(), "--prefix") {
			t.Errorf("stackctl %s --prefix x: %v, want an error naming the argument", cmd, err)
		}
	}
}
