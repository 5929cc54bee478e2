package convert

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestConvertOffCPU: an offcpu profile's documents are of type offcpu and
// store the offcpu value, found by its name wherever it is among the sample
// types (here first, where the pprof convention would take the last).
func TestConvertOffCPU(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	p := pproftest.New([]*profile.ValueType{{Type: "offcpu", Unit: "nanoseconds"}, {Type: "samples", Unit: "count"}}, at, 10*time.Second).
		Sample(map[string]string{"pid": "3", "comm": "api"}, []int64{9000, 4}, "read", "main").
		Profile()
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileOffCPU, Host: "h"}, "", p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs.Samples) != 1 || len(docs.Stacks) != 1 {
		t.Fatalf("%d sample and %d stack documents, want 1 and 1", len(docs.Samples), len(docs.Stacks))
	}
	if d := decodeSample(t, docs.Samples[0]); d.Type != "offcpu" || d.Value != 9000 || d.Service != "api" {
		t.Fatalf("offcpu doc = %+v, want type offcpu, value 9000", d)
	}
}
