package main

import (
	"os"
	"strings"
)

// counterSeries are the counters part E reads from every consumer
// instance, by what they count: the records it read (a restart or a
// rebalance reads those after the last commit again), its writes (bulk
// requests; the symbolizer's are transactions) and the documents they
// carried, and the indexer's stacks documents (each instance writes a stack
// once per day it sees it: instances that share a stack write it each).
var counterSeries = map[string]map[string]string{
	"stackstream-symbolizer": {
		"records": "stackstream_symbolizer_records_total",
		"writes":  "stackstream_symbolizer_transactions_total",
	},
	"stackstream-indexer": {
		"records":   "stackstream_indexer_records_total",
		"writes":    "stackstream_indexer_bulk_requests_total",
		"documents": "stackstream_indexer_bulk_documents_total",
		"stacks":    `stackstream_indexer_documents_total{kind="stacks"}`,
	},
	"stackstream-rollup": {
		"records":   "stackstream_rollup_records_total",
		"writes":    "stackstream_rollup_bulk_requests_total",
		"documents": "stackstream_rollup_bulk_documents_total",
	},
}

// instanceCounters reads counterSeries of one instance, keyed
// "<service>/<what>".
func (b *bench) instanceCounters(inst string) map[string]float64 {
	out := map[string]float64{}
	svc := serviceOf(inst)
	for what, series := range counterSeries[svc] {
		v, _ := metricSum("http://"+b.addrOf(inst)+"/metrics", series)
		out[svc+"/"+what] = float64(v)
	}
	return out
}

// counters sums counterSeries over every running instance and the last
// reading of every killed one.
func (b *bench) counters() map[string]float64 {
	out := map[string]float64{}
	for _, svc := range consumers {
		for _, inst := range b.instances(svc) {
			for k, v := range b.instanceCounters(inst) {
				out[k] += v
			}
		}
	}
	b.mu.Lock()
	for k, v := range b.deadCounters {
		out[k] += v
	}
	b.mu.Unlock()
	return out
}

// loadAverage is /proc/loadavg's 1-, 5- and 15-minute load averages.
func loadAverage() string {
	s, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(s))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
