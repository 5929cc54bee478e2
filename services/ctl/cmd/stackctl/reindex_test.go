package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/services/ctl/internal/ctl"
)

// TestReindexFlags: bad flags stop stackctl reindex with a message naming
// the flag, before it connects to anything.
func TestReindexFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-left", "-1"}, "--max-left"},
		{[]string{"--interval", "0s"}, "--interval"},
		{[]string{"--from", "yesterday"}, "--from"},
		{[]string{"--bogus"}, "bogus"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := runReindex(context.Background(), ctl.Config{}, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
