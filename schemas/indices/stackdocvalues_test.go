package indices

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestWithStackDocValues: a stacks document stored without its stacks in
// _source reads back whole from its doc values as the node gives them
// (base64 without padding), an old one's _source with the same stacks is
// read alike, a document without stacks stays as it is, and doc values that
// do not decode are refused.
func TestWithStackDocValues(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	want := RollupDoc{Timestamp: at, Resolution: ResolutionMinute, Kind: KindStacks, Type: "cpu", Service: "s", Host: "h", Value: 70, Samples: 7}
	if err := want.SetStacks([]string{"b", "c", "a"}, []int64{20, 0, 50}); err != nil {
		t.Fatal(err)
	}
	whole, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	stripped := want
	stripped.StackIDs, stripped.StackValues = nil, nil
	source, err := json.Marshal(stripped)
	if err != nil {
		t.Fatal(err)
	}
	f := StackDocValues{StackIDs: want.StackIDs, StackValues: []string{base64.RawStdEncoding.EncodeToString(want.StackValues)}}
	for name, src := range map[string][]byte{"without stacks in _source": source, "with them (before schema 4)": whole} {
		t.Run(name, func(t *testing.T) {
			out, err := WithStackDocValues(src, f)
			if err != nil {
				t.Fatal(err)
			}
			var got RollupDoc
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read back %+v, want %+v", got, want)
			}
		})
	}
	service := []byte(`{"kind":"service","value":3}`)
	if out, err := WithStackDocValues(service, StackDocValues{}); err != nil || string(out) != string(service) {
		t.Fatalf("a document without stacks became %s (%v)", out, err)
	}
	for name, bad := range map[string]struct {
		src string
		f   StackDocValues
	}{
		"two values":      {`{}`, StackDocValues{StackIDs: []string{"a"}, StackValues: []string{"AQE", "AQE"}}},
		"not base64":      {`{}`, StackDocValues{StackIDs: []string{"a"}, StackValues: []string{"!!"}}},
		"source an array": {`[1]`, StackDocValues{StackIDs: []string{"a"}}},
		"source null":     {`null`, StackDocValues{StackIDs: []string{"a"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := WithStackDocValues([]byte(bad.src), bad.f); !errors.Is(err, ErrStackDocValues) {
				t.Fatalf("error %v, want ErrStackDocValues", err)
			}
		})
	}
}
