package kafka

import (
	"context"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// LogTo sends franz-go's own log lines (group joins, assignments, retries)
// to l, under component=kafka, at the levels l has enabled.
func LogTo(l *slog.Logger) kgo.Opt {
	return kgo.WithLogger(kgoLogger{l.With("client", "kafka")})
}

type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case k.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case k.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelInfo:
		lv = slog.LevelInfo
		if routine(msg) {
			lv = slog.LevelDebug
		}
	}
	k.l.Log(context.Background(), lv, msg, keyvals...)
}

// routine reports franz-go's info lines written for every transaction or
// flush (a transactional producer writes five a batch: thousands an hour),
// which go to debug; group joins, assignments and revokes stay at info.
func routine(msg string) bool {
	return strings.Contains(msg, "transact") || strings.HasPrefix(msg, "flush") || strings.HasPrefix(msg, "issuing")
}
