package record

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDLQRecordFits(t *testing.T) {
	manyHeaders := make([]kgo.RecordHeader, 10000)
	for i := range manyHeaders {
		manyHeaders[i] = kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: bytes.Repeat([]byte("v"), 1000)}
	}
	tests := []struct {
		name      string
		orig      *kgo.Record
		reason    string
		truncated string // the header's value; "" when nothing is cut
	}{
		{"small record unchanged", &kgo.Record{Key: []byte("web-1"), Value: []byte("junk"),
			Headers: []kgo.RecordHeader{{Key: HeaderHost, Value: []byte("web-1")}}}, "decode profile: bad", ""},
		{"1.5 MB value", &kgo.Record{Key: []byte("web-1"), Value: make([]byte, 1500000)}, "decode", "value_len=1500000 value_kept="},
		{"1 MB key", &kgo.Record{Key: make([]byte, 1<<20), Value: make([]byte, 100)}, "decode", "value_len=100 key_len=1048576 key_kept=4096"},
		{"1 MB key and value", &kgo.Record{Key: make([]byte, 1<<20), Value: make([]byte, 1<<20)}, "decode", "value_len=1048576 key_len=1048576 key_kept=4096 value_kept="},
		{"10,000 headers", &kgo.Record{Value: make([]byte, 100), Headers: manyHeaders}, "decode", "value_len=100 headers=10000 headers_kept=64"},
		{"one 1 MB header", &kgo.Record{Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "big", Value: make([]byte, 1<<20)}, {Key: "small", Value: []byte("kept")}}},
			"decode", "value_len=1 headers=2 headers_kept=1"},
		{"long reason", &kgo.Record{Value: []byte("v")}, strings.Repeat("é", 5000), "value_len=1 reason_len=10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.orig.Topic, tt.orig.Partition, tt.orig.Offset = "stackstream.profiles.raw", 3, 1234567
			d := DLQRecord("stackstream.dlq", "stackstream-test", tt.orig, errors.New(tt.reason))
			if n := DLQRecordBytes(d); n > DLQMaxRecordBytes {
				t.Fatalf("DLQ record is %d bytes, budget %d", n, DLQMaxRecordBytes)
			}
			want := map[string]string{
				HeaderDLQReason: TruncateUTF8(tt.reason, MaxDLQReasonBytes), HeaderDLQTopic: "stackstream.profiles.raw",
				HeaderDLQPartition: "3", HeaderDLQOffset: "1234567", HeaderDLQService: "stackstream-test",
			}
			for k, v := range want {
				if got := HeaderValue(d.Headers, k); got != v {
					t.Errorf("header %s = %.40q, want %.40q", k, got, v)
				}
			}
			got := HeaderValue(d.Headers, HeaderDLQTruncated)
			if !strings.HasPrefix(got, tt.truncated) || (tt.truncated == "") != (got == "") {
				t.Errorf("%s = %q, want %q...", HeaderDLQTruncated, got, tt.truncated)
			}
			if !bytes.HasPrefix(tt.orig.Value, d.Value) || !bytes.HasPrefix(tt.orig.Key, d.Key) {
				t.Errorf("key and value must be prefixes of the original's")
			}
			if tt.truncated == "" && (len(d.Value) != len(tt.orig.Value) || len(d.Headers) != len(tt.orig.Headers)+5) {
				t.Errorf("record that fits was changed: %d value bytes, %d headers", len(d.Value), len(d.Headers))
			}
		})
	}
}

// A record that forges DLQ headers (or a DLQ record replayed into a
// consumer) does not keep them: the DLQ headers say what this service saw.
func TestDLQRecordDropsForgedHeaders(t *testing.T) {
	orig := &kgo.Record{Topic: "t", Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: HeaderDLQReason, Value: []byte("forged")}, {Key: HeaderDLQOffset, Value: []byte("0")}, {Key: HeaderHost, Value: []byte("h")}}}
	d := DLQRecord("dlq", "svc", orig, errors.New("real reason"))
	n := 0
	for _, h := range d.Headers {
		if h.Key == HeaderDLQReason || h.Key == HeaderDLQOffset {
			n++
		}
	}
	if n != 2 || HeaderValue(d.Headers, HeaderDLQReason) != "real reason" || HeaderValue(d.Headers, HeaderHost) != "h" {
		t.Fatalf("headers %v", d.Headers)
	}
}
