package indices

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestServiceGroups: the builder gathers documents per group and window
// (a group without a host, an hourly document, minutes ignored), the
// encoding round-trips, and every truncation of it is an error.
func TestServiceGroups(t *testing.T) {
	hour := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	var b ServiceGroupsBuilder
	b.Add("b", "h-1", ResolutionTenMinutes, hour.Add(50*time.Minute), 1, -7)
	b.Add("a", "", ResolutionTenMinutes, hour.Add(10*time.Minute), 2, 300)
	b.Add("a", "", ResolutionHour, hour, 1, 1<<40)
	b.Add("a", "", ResolutionMinute, hour, 1, 5)
	d := b.Doc("cpu", hour, ServiceGroupsSources(3, 10, 1, 4))
	want := []ServiceGroup{
		{Service: "a", Present: 1<<1 | PresentHour, Ten: [6]int64{0, 300}, Hour: 1 << 40},
		{Service: "b", Host: "h-1", Present: 1 << 5, Ten: [6]int64{5: -7}},
	}
	got, err := DecodeServiceGroups(d.Groups)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v %v, want %+v", got, err, want)
	}
	if d.Kind != KindServiceGroups || d.Value != 293 || d.Sources != "10m:3:10/1h:1:4" {
		t.Fatalf("%+v", d)
	}
	for n := range len(d.Groups) {
		if _, err := DecodeServiceGroups(d.Groups[:n]); !errors.Is(err, ErrServiceGroups) {
			t.Fatalf("%d of %d bytes: %v", n, len(d.Groups), err)
		}
	}
	if _, err := DecodeServiceGroups(append(d.Groups, 0)); !errors.Is(err, ErrServiceGroups) {
		t.Fatalf("a byte after the groups: %v", err)
	}
}
