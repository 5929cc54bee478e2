package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLag(t *testing.T) {
	for _, tc := range []struct {
		name             string
		high, last, want int64
	}{
		{"caught up", 10, 9, 0},
		{"behind", 10, 4, 5},
		{"stale watermark", 3, 9, 0},
		{"empty partition", 0, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lag(tc.high, tc.last); got != tc.want {
				t.Fatalf("Lag(%d, %d) = %d, want %d", tc.high, tc.last, got, tc.want)
			}
		})
	}
}

func TestConsumerNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewConsumer(reg, "indexer", ConsumerHelp{Records: "r", DLQ: "d"})
	c.Records.WithLabelValues("indexed").Inc()
	c.DLQ.WithLabelValues("not_gzip").Inc()
	c.SetLag(3, 100, 89)
	c.SetLag(4, 1, 0)
	c.ForgetPartition(4)
	c.CommitSeconds.Observe(0.01)
	want := `
# HELP stackstream_indexer_lag_records Records behind the partition's high watermark, as of the last fetch.
# TYPE stackstream_indexer_lag_records gauge
stackstream_indexer_lag_records{partition="3"} 10
# HELP stackstream_indexer_records_total r
# TYPE stackstream_indexer_records_total counter
stackstream_indexer_records_total{outcome="indexed"} 1
# HELP stackstream_indexer_dlq_total d
# TYPE stackstream_indexer_dlq_total counter
stackstream_indexer_dlq_total{reason="not_gzip"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stackstream_indexer_lag_records", "stackstream_indexer_records_total", "stackstream_indexer_dlq_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c.CommitSeconds); n != 1 {
		t.Fatalf("commit_seconds series = %d", n)
	}
}
