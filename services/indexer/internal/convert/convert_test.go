package convert

import (
	"errors"
	"reflect"
	"testing"

	"github.com/stackstream/stackstream/schemas/record"
)

// TestRecordTakesEachPath: Record converts on the fast path what it takes,
// says so, and gives every other record the general path's documents or
// error.
func TestRecordTakesEachPath(t *testing.T) {
	c := New(DefaultLimits())
	for _, tc := range fastCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			docs, path, err := c.Record(testNames, tc.meta, "", tc.value, tc.fallback, nil)
			if want := map[bool]Path{true: Fast, false: General}[tc.wantFast]; path != want {
				t.Fatalf("path %s, want %s", path, want)
			}
			slow, slowErr := decodeConvert(testLimits, testNames, tc.meta, "", tc.value, tc.fallback)
			if (err == nil) != (slowErr == nil) || (err != nil && err.Error() != slowErr.Error()) {
				t.Fatalf("error %v, want the general path's %v", err, slowErr)
			}
			if err == nil && !reflect.DeepEqual(docs, slow) {
				t.Fatal("documents differ from the general path's")
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	long := make([]byte, record.MaxHostBytes+1)
	for i := range long {
		long[i] = 'h'
	}
	if err := CheckHost(string(long)); !errors.Is(err, ErrHostTooLong) {
		t.Fatalf("CheckHost of %d bytes = %v, want ErrHostTooLong", len(long), err)
	}
	if err := CheckHost(string(long[:record.MaxHostBytes])); err != nil {
		t.Fatalf("CheckHost of %d bytes = %v", record.MaxHostBytes, err)
	}
}
