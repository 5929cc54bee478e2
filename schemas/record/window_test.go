package record

import (
	"errors"
	"testing"
	"time"
)

func TestCheckTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		t    time.Time
		ok   bool
	}{
		{"now", now, true},
		{"within skew", now.Add(9 * time.Minute), true},
		{"future", now.Add(11 * time.Minute), false},
		{"year 2262", time.Unix(0, 1<<63-1), false},
		{"within retention", now.Add(-6 * 24 * time.Hour), true},
		{"past retention", now.Add(-8 * 24 * time.Hour), false},
		{"1970", time.Unix(0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTime(tc.t, now, 7*24*time.Hour, DefaultMaxClockSkew)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrTimeOutOfRange)) {
				t.Fatalf("CheckTime(%s) = %v, want ok=%v", tc.t, err, tc.ok)
			}
		})
	}
	if err := CheckTime(time.Unix(0, 0), now, 0, DefaultMaxClockSkew); err != nil {
		t.Fatalf("maxAge 0 should accept any past time: %v", err)
	}
}

func TestSubPart(t *testing.T) {
	if got := SubPart("", 3); got != "3" {
		t.Fatalf("SubPart(\"\", 3) = %q", got)
	}
	if got := SubPart("2", 0); got != "2.0" {
		t.Fatalf("SubPart(\"2\", 0) = %q", got)
	}
}

func TestValidLabelKey(t *testing.T) {
	for k, want := range map[string]bool{
		"pid": true, "_x": true, "A9_b": true, "": false, "9a": false, "a.b": false,
		"a-b": false, "é": false, string(make([]byte, 65)): false,
	} {
		if got := ValidLabelKey(k); got != want {
			t.Errorf("ValidLabelKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"}, {"abcdef", 3, "abc"}, {"aé", 2, "a"}, {"aéb", 3, "aé"}, {"€", 2, ""},
	} {
		if got := TruncateUTF8(tc.s, tc.n); got != tc.want {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
