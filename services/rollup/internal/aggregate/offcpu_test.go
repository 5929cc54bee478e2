package aggregate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestOffCPUDocs: an offcpu profile of the same service and window as a cpu
// one gets its own rollups (type offcpu, the offcpu value, no cores), and
// the cpu rollups hold only CPU time.
func TestOffCPUDocs(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	off := pproftest.New([]*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "offcpu", Unit: "nanoseconds"}}, t0.Add(10*time.Second), 10*time.Second).
		Sample(svc("checkout"), []int64{4, 7000}, "read", "wait", "main").
		Profile()
	add(t, p, off, record.ProfileOffCPU, 1)
	docs := map[string]indices.RollupDoc{}
	for _, d := range perStack(p.Pending(true)) {
		docs[d.Type+"/"+d.Resolution+"/"+d.Kind+"/"+d.Service+"/"+d.Function+strings.Join(d.StackIDs, ",")] = d
	}
	checks := []struct {
		key  string
		want indices.RollupDoc
	}{
		{"cpu/1m/service/checkout/", indices.RollupDoc{Value: 40, Samples: 4, Cores: 40 / 60e9}},
		{"offcpu/1m/service/checkout/", indices.RollupDoc{Value: 7000, Samples: 4}},
		{"offcpu/1h/service/checkout/", indices.RollupDoc{Value: 7000, Samples: 4}},
		{"offcpu/1h/function/checkout/read", indices.RollupDoc{Self: 7000, Total: 7000}},
		{"offcpu/1h/function/checkout/main", indices.RollupDoc{Total: 7000}},
		{"offcpu/1m/stack/checkout/" + stackID("read", "wait", "main"), indices.RollupDoc{Value: 7000}},
		{"cpu/1h/function/checkout/main", indices.RollupDoc{Total: 40}},
	}
	for _, c := range checks {
		got, ok := docs[c.key]
		if !ok {
			t.Errorf("no doc %s", c.key)
			continue
		}
		if got.Value != c.want.Value || got.Self != c.want.Self || got.Total != c.want.Total || got.Samples != c.want.Samples || got.Cores != c.want.Cores {
			t.Errorf("%s = %+v, want %+v", c.key, got, c.want)
		}
	}
	if _, ok := docs["cpu/1h/function/checkout/read"]; ok {
		t.Errorf("an off-CPU function among the cpu rollups")
	}
}
