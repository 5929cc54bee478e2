package telemetry

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Consumer is the vocabulary every Kafka consumer shares, so one dashboard
// and one alert serve them all; each is named stackstream_<service>_<name>:
//
//	records_total{outcome}   records read, by what became of them
//	lag_records{partition}   records behind the high watermark as of the last fetch
//	dlq_total{reason}        records (and documents) sent to the DLQ, by reason
//	commit_seconds           time to commit offsets (or end a transaction)
type Consumer struct {
	Records       *prometheus.CounterVec
	Lag           *prometheus.GaugeVec
	DLQ           *prometheus.CounterVec
	CommitSeconds prometheus.Histogram
}

// ConsumerHelp says what a service's records_total outcomes and dlq_total
// reasons are.
type ConsumerHelp struct {
	Records, DLQ string
}

// NewConsumer creates the metrics of service and registers them (when reg is
// not nil).
func NewConsumer(reg prometheus.Registerer, service string, help ConsumerHelp) *Consumer {
	ns := "stackstream_" + service
	c := &Consumer{
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_total", Help: help.Records}, []string{"outcome"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "lag_records",
			Help: "Records behind the partition's high watermark, as of the last fetch."}, []string{"partition"}),
		DLQ: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dlq_total", Help: help.DLQ}, []string{"reason"}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "commit_seconds",
			Help: "Time to commit the offsets of what was processed.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(c.Records, c.Lag, c.DLQ, c.CommitSeconds)
	}
	return c
}

// SetLag records a partition's lag after a fetch whose last record is at
// lastOffset: the high watermark is the offset of the next record written.
func (c *Consumer) SetLag(partition int32, highWatermark, lastOffset int64) {
	c.Lag.WithLabelValues(strconv.Itoa(int(partition))).Set(float64(Lag(highWatermark, lastOffset)))
}

// ForgetPartition drops the lag of a partition no longer consumed here, so it
// is not reported twice after a rebalance.
func (c *Consumer) ForgetPartition(partition int32) {
	c.Lag.DeleteLabelValues(strconv.Itoa(int(partition)))
}

// Lag is the records behind the high watermark once the record at
// lastOffset is processed, never negative (a stale watermark can be behind).
func Lag(highWatermark, lastOffset int64) int64 {
	return max(highWatermark-lastOffset-1, 0)
}
