package api_test

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestOffCPUType: offcpu samples (nanoseconds blocked) are their own type
// next to cpu ones of the same service: their series is in threads blocked
// (nanoseconds per nanosecond of the step), their flame graph and pprof
// export in offcpu nanoseconds, and cpu answers leave them out.
func TestOffCPUType(t *testing.T) {
	cl, names := querytest.Setup(t)
	at := now.Add(-10 * time.Minute)
	cpuStack, cpuID := querytest.Stack(names, at, "main", "compute")
	offStack, offID := querytest.Stack(names, at, "main", "worker", "read")
	docs := []querytest.Doc{cpuStack, offStack}
	docs = append(docs, querytest.Samples(names,
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "svc", StackIDs: []string{cpuID}, Value: int64(30 * time.Second), Count: 570},
		indices.SampleDoc{Timestamp: at, Type: "offcpu", Host: "h", Service: "svc", StackIDs: []string{offID}, Value: int64(90 * time.Second), Count: 40},
	)...)
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})
	window := url.Values{"from": {now.Add(-time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}, "step": {"60"}}
	with := func(kv ...string) url.Values {
		q := url.Values{}
		for k, v := range window {
			q[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}

	for _, tc := range []struct {
		typ, unit string
		value     float64 // in the sample's minute
	}{{"offcpu", "threads", 1.5}, {"cpu", "cores", 0.5}} {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", with("type", tc.typ, "group_by", "service"), &s)
		if s.Type != tc.typ || s.Unit != tc.unit || len(s.Series) != 1 {
			t.Fatalf("%s series: type %q unit %q, %d series", tc.typ, s.Type, s.Unit, len(s.Series))
		}
		var sum float64
		for _, p := range s.Series[0].Points {
			sum += p[1]
		}
		if !near(sum, tc.value) {
			t.Errorf("%s series: %v %s in all, want %v", tc.typ, sum, tc.unit, tc.value)
		}
	}

	var f api.FlamegraphResponse
	get(t, base, "/api/v1/flamegraph", with("type", "offcpu"), &f)
	if f.Unit != "nanoseconds" || f.Total != int64(90*time.Second) || len(f.Root.Children) != 1 || f.Root.Children[0].Name != "main" ||
		len(f.Root.Children[0].Children) != 1 || f.Root.Children[0].Children[0].Name != "worker" {
		t.Fatalf("offcpu flame graph: unit %q total %d root %+v", f.Unit, f.Total, f.Root)
	}

	resp, err := http.Get(base + "/api/v1/pprof?" + with("type", "offcpu").Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pprof: HTTP %d: %s", resp.StatusCode, buf.String())
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[len(s.Value)-1]
	}
	last := p.SampleType[len(p.SampleType)-1]
	if last.Type != "offcpu" || last.Unit != "nanoseconds" || total != int64(90*time.Second) {
		t.Fatalf("pprof export: sample types %v, total %d", p.SampleType, total)
	}
}
