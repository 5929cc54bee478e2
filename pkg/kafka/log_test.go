package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLogToLevels: franz-go's per-transaction info lines go to debug, its
// group lines stay at info, warnings and errors keep their level.
func TestLogToLevels(t *testing.T) {
	var buf bytes.Buffer
	l := kgoLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if l.Level() != kgo.LogLevelInfo {
		t.Fatalf("level %v at slog info", l.Level())
	}
	l.Log(kgo.LogLevelInfo, "beginning transaction", "transactional_id", "x")
	l.Log(kgo.LogLevelInfo, "ending transaction", "commit", true)
	l.Log(kgo.LogLevelInfo, "end transaction response successfully received")
	l.Log(kgo.LogLevelInfo, "flushing")
	l.Log(kgo.LogLevelInfo, "assigning partitions", "group", "g")
	l.Log(kgo.LogLevelWarn, "heartbeat errored", "group", "g")
	out := buf.String()
	if strings.Contains(out, "transaction") || strings.Contains(out, "flushing") {
		t.Errorf("routine lines at info:\n%s", out)
	}
	if !strings.Contains(out, "assigning partitions") || !strings.Contains(out, "level=WARN msg=\"heartbeat errored\"") {
		t.Errorf("group lines missing:\n%s", out)
	}
}
