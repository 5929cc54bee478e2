package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	now, err := parseArgs("ixb15-1-", "2026-12-03T01:00:00+01:00", 2)
	if err != nil || !now.Equal(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)) || now.Location() != time.UTC {
		t.Fatalf("parseArgs = %v, %v; want 2026-12-03T00:00:00Z", now, err)
	}
	for _, c := range []struct {
		prefix, now string
		days        int
		want        string
	}{
		{"", "2026-12-03T01:00:00Z", 2, "-index-prefix"},
		{"ixb15-*", "2026-12-03T01:00:00Z", 2, "-index-prefix"},
		{"a,b", "2026-12-03T01:00:00Z", 2, "-index-prefix"},
		{"a/b", "2026-12-03T01:00:00Z", 2, "-index-prefix"},
		{"ixb15-1-", "2026-12-03T01:00:00Z", 0, "-days"},
		{"ixb15-1-", "2026-12-03T01:00:00Z", maxDays + 1, "-days"},
		{"ixb15-1-", "", 2, "-now"},
		{"ixb15-1-", "2026-12-03 01:00", 2, "-now"},
	} {
		if _, err := parseArgs(c.prefix, c.now, c.days); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseArgs(%q, %q, %d) = %v, want an error naming %s", c.prefix, c.now, c.days, err, c.want)
		}
	}
}
