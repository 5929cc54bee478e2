package main

import (
	"context"
	"errors"

	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
)

// runReplay is wired to pkg/replay once it lands.
func runReplay(ctx context.Context, cfg ctl.Config, args []string) error {
	return errors.New("replay: not available in this build yet")
}
