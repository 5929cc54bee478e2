package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
)

// TestCacheGauges: the gauges read what the chain and the topic store hold
// at each scrape, beside their bounds.
func TestCacheGauges(t *testing.T) {
	store := source.NewTopic(1<<20, nil)
	v, err := debuginfo.Encode(&debuginfo.File{BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x800, Name: "main"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Apply([]byte("aa11"), v); err != nil {
		t.Fatal(err)
	}
	chain := source.NewChain(source.Options{MissTTL: time.Minute}, store)
	reg := prometheus.NewRegistry()
	CacheGauges(reg, Caches{Chain: chain, Topic: store, MaxTables: 7, MaxTableBytes: 2 << 20, TopicBytes: 1 << 20, MaxMisses: 9})

	tab := chain.Table(context.Background(), "aa11")
	chain.Table(context.Background(), "bb22") // found nowhere
	tab.Lookup(0x1010)
	want := map[string]float64{
		"stackstream_symbolizer_cache_build_ids/tables":     1,
		"stackstream_symbolizer_cache_build_ids/debuginfo":  1,
		"stackstream_symbolizer_cache_build_ids/misses":     1,
		"stackstream_symbolizer_cache_bytes/tables":         float64(tab.Bytes()),
		"stackstream_symbolizer_cache_bytes/debuginfo":      float64(store.Bytes()),
		"stackstream_symbolizer_cache_max_bytes/tables":     2 << 20,
		"stackstream_symbolizer_cache_max_bytes/debuginfo":  1 << 20,
		"stackstream_symbolizer_cache_max_build_ids/tables": 7,
		"stackstream_symbolizer_cache_max_build_ids/misses": 9,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cache" {
					got[mf.GetName()+"/"+l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("gauges %v, want %d", got, len(want))
	}
	if tab.Bytes() <= 256 {
		t.Errorf("table of one symbol with one address looked up estimated at %d bytes", tab.Bytes())
	}
}
