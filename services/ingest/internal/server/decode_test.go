package server

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
)

// TestSubtractPrev: with a previous profile, cumulative sample types
// become the delta (never below 0); the others stay.
func TestSubtractPrev(t *testing.T) {
	types := func() []*profile.ValueType {
		return []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_space", Unit: "bytes"}}
	}
	now := time.Now()
	cur := pproftest.New(types(), now, 10*time.Second).
		Sample(nil, []int64{100, 10}, "grow", "main").
		Sample(nil, []int64{5, 0}, "shrunk", "main").Profile()
	prev := pproftest.New(types(), now.Add(-10*time.Second), 10*time.Second).
		Sample(nil, []int64{40, 7}, "grow", "main").
		Sample(nil, []int64{9, 0}, "shrunk", "main").Profile()
	got, err := subtractPrev(cur, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string][]int64{}
	for _, s := range got.Sample {
		values[s.Location[0].Line[0].Function.Name] = s.Value
	}
	if v := values["grow"]; len(v) != 2 || v[0] != 60 || v[1] != 10 {
		t.Errorf("grow = %v, want [60 10]", v)
	}
	if _, ok := values["shrunk"]; ok {
		t.Errorf("a sample whose delta is 0 (negative, clamped) stayed: %v", values["shrunk"])
	}
	if got.TimeNanos != now.UnixNano() {
		t.Errorf("time = %d, want the current profile's", got.TimeNanos)
	}
	// sample_type_config saying inuse_space is cumulative subtracts it too.
	cur2 := pproftest.New(types(), now, time.Second).Sample(nil, []int64{100, 10}, "grow").Profile()
	prev2 := pproftest.New(types(), now, time.Second).Sample(nil, []int64{40, 7}, "grow").Profile()
	got, err = subtractPrev(cur2, prev2, map[string]sampleType{"inuse_space": {Cumulative: true}})
	if err != nil || got.Sample[0].Value[1] != 3 {
		t.Fatalf("config cumulative: %v %v", got.Sample, err)
	}
}
