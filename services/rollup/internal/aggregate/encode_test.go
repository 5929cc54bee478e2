package aggregate

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

func checkAppendJSON(t *testing.T, d indices.RollupDoc) {
	t.Helper()
	want, wantErr := json.Marshal(&d)
	p := Pending{Doc: d}
	got, err := p.AppendJSON([]byte("x"))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%+v: AppendJSON error %v, json.Marshal error %v", d, err, wantErr)
	}
	if err == nil && string(got) != "x"+string(want) {
		t.Fatalf("%+v:\n got %s\nwant x%s", d, got, want)
	}
}

// TestAppendJSONMatchesMarshal: the consumer's encoder writes exactly what
// json.Marshal writes, for the documents of real profiles and for names
// that need escaping.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	profs, hosts := fleetProfiles(3, 13)
	p := NewPartition(Config{AllowedLateness: time.Minute, Names: indices.Default, Now: func() time.Time { return t0.Add(time.Hour) }}, Checkpoint{})
	for i, pr := range profs {
		if _, err := p.Add(Input{Profile: pr, Type: "cpu", Host: hosts[i], Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	mem := pproftest.NewMemory(t0.Add(30*time.Second), 10*time.Second).
		Sample(map[string]string{record.LabelService: "svc-a", record.LabelPID: "1"}, []int64{1 << 30}).
		Sample(map[string]string{record.LabelService: "svc-b", record.LabelPID: "2"}, []int64{3}).Profile()
	if _, err := p.Add(Input{Profile: mem, Type: "memory", Host: "h<&>", Offset: int64(len(profs))}); err != nil {
		t.Fatal(err)
	}
	all := p.Pending(true)
	if len(all) < 1000 {
		t.Fatalf("only %d documents", len(all))
	}
	for _, d := range all {
		checkAppendJSON(t, d.Doc)
	}
	base := indices.RollupDoc{Timestamp: t0, Resolution: "1m", Kind: "function", Type: "cpu", Service: "s"}
	for _, s := range []string{"", "a\"b", `back\slash`, "<html>&", "tab\there", "\x00\x1f", "é ü 日本", "\u2028\u2029", "bad \xff utf8", "\x7f"} {
		for _, f := range []func(*indices.RollupDoc){
			func(d *indices.RollupDoc) { d.Service = s },
			func(d *indices.RollupDoc) { d.Host = s },
			func(d *indices.RollupDoc) { d.Function = s },
			func(d *indices.RollupDoc) { d.StackIDs = []string{s} },
			func(d *indices.RollupDoc) { d.StackIDs = []string{"a", s, "b"} },
		} {
			d := base
			f(&d)
			checkAppendJSON(t, d)
		}
	}
	for _, v := range []float64{1e-7, 1e21, 0.1, 1.0 / 3, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, -2, math.NaN(), math.Inf(1)} {
		d := base
		d.Cores, d.MemAvg = v, v
		checkAppendJSON(t, d)
	}
	for _, ts := range []time.Time{t0.Add(123456789), time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), t0.In(time.FixedZone("x", 3600))} {
		d := base
		d.Timestamp = ts
		checkAppendJSON(t, d)
	}
	d := base
	d.Value, d.Self, d.Total, d.Samples, d.MemMax = math.MinInt64, -1, math.MaxInt64, 7, 9
	checkAppendJSON(t, d)
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("svc", "host", "fn", "id", int64(1), int64(2), 0.5, int64(0))
	f.Add("<\xff>", "", "\u2028", "", int64(-1), int64(0), 1e300, int64(1e18))
	f.Fuzz(func(t *testing.T, service, host, function, stack string, value, self int64, cores float64, ns int64) {
		checkAppendJSON(t, indices.RollupDoc{Timestamp: time.Unix(0, ns).UTC(), Resolution: "1h", Kind: "stack", Type: "cpu",
			Service: service, Host: host, Function: function, StackIDs: []string{stack, host}, StackValues: []byte(function), Value: value, Self: self, Total: -value, Samples: self, Cores: cores, MemAvg: -cores, MemMax: value, Tree: []byte(stack)})
	})
}
