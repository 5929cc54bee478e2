package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/record"
)

// TestEncodeBounded splits a profile too large for one record into parts
// that each fit, lose no sample value, and each decode on their own.
func TestEncodeBounded(t *testing.T) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		TimeNanos:  time.Now().UnixNano(), DurationNanos: int64(10 * time.Second),
	}
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x800000, File: "/bin/x", BuildID: "ab"}
	p.Mapping = []*profile.Mapping{m}
	var want int64
	for i := range 20000 {
		loc := &profile.Location{ID: uint64(i + 1), Mapping: m, Address: 0x400000 + uint64(i)*64}
		p.Location = append(p.Location, loc)
		p.Sample = append(p.Sample, &profile.Sample{
			Location: []*profile.Location{loc},
			Value:    []int64{int64(i%7 + 1), int64(i%7+1) * 52631578},
			Label:    map[string][]string{record.LabelPID: {fmt.Sprint(i)}},
		})
		want += int64(i%7 + 1)
	}
	whole, err := encodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	limit := len(whole) / 3
	values, err := encodeBounded(p, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(values) < 3 {
		t.Fatalf("%d parts for a profile 3 times the limit", len(values))
	}
	var got int64
	for _, v := range values {
		if len(v) > limit {
			t.Fatalf("part of %d bytes over the limit %d", len(v), limit)
		}
		part, err := record.DecodeProfile(v)
		if err != nil {
			t.Fatal(err)
		}
		if part.TimeNanos != p.TimeNanos || part.DurationNanos != p.DurationNanos {
			t.Fatal("part lost the interval")
		}
		for _, s := range part.Sample {
			got += s.Value[0]
		}
	}
	if got != want || len(p.Sample) != 20000 {
		t.Fatalf("parts hold %d samples, want %d (input left with %d samples)", got, want, len(p.Sample))
	}
	if one, err := encodeBounded(p, len(whole)); err != nil || len(one) != 1 {
		t.Fatalf("a profile within the limit gave %d parts, %v", len(one), err)
	}
}

// TestSplitIntervalParts splits one busy process's interval over several
// records: each must name a distinct part (downstream IDs include it, so the
// process's samples in one part do not overwrite those in another), and
// together they hold every sample. An interval that fits has no part header.
func TestSplitIntervalParts(t *testing.T) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		TimeNanos:  time.Now().UnixNano(), DurationNanos: int64(10 * time.Second),
	}
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x800000, File: "/bin/busy", BuildID: "ab"}
	p.Mapping = []*profile.Mapping{m}
	var want int64
	for i := range 20000 {
		loc := &profile.Location{ID: uint64(i + 1), Mapping: m, Address: 0x400000 + uint64(i)*64}
		p.Location = append(p.Location, loc)
		p.Sample = append(p.Sample, &profile.Sample{
			Location: []*profile.Location{loc},
			Value:    []int64{int64(i%5 + 1), int64(i%5+1) * 52631578},
			Label:    map[string][]string{record.LabelPID: {"42"}},
		})
		want += int64(i%5 + 1)
	}
	a := &Agent{cfg: Config{HostID: "h"}, d: Deps{Topics: record.TopicsFor("t."), Version: "test"}}
	whole, err := encodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := a.profileRecords(record.ProfileCPU, p, len(whole)/3)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 3 {
		t.Fatalf("%d records for an interval 3 times the limit", len(recs))
	}
	parts := map[string]bool{}
	var got int64
	for _, r := range recs {
		part := header(r, record.HeaderPart)
		if part == "" || parts[part] {
			t.Fatalf("record part %q: want a distinct non-empty part on each of %d records (have %v)", part, len(recs), parts)
		}
		parts[part] = true
		if _, err := record.ParseMeta(r.Headers); err != nil {
			t.Fatal(err)
		}
		d, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if d.TimeNanos != p.TimeNanos {
			t.Fatal("part lost the interval's time")
		}
		for _, s := range d.Sample {
			got += s.Value[0]
		}
	}
	if got != want {
		t.Fatalf("parts hold %d samples, want %d", got, want)
	}
	one, err := a.profileRecords(record.ProfileCPU, p, len(whole))
	if err != nil || len(one) != 1 {
		t.Fatalf("an interval within the limit gave %d records, %v", len(one), err)
	}
	if part := header(one[0], record.HeaderPart); part != "" {
		t.Fatalf("unsplit interval carries part %q", part)
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
