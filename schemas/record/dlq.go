package record

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers of a DLQ record, added to the original record's headers. The DLQ
// value is the original value, so it can be inspected or replayed, unless
// it had to be cut to fit (HeaderDLQTruncated).
const (
	HeaderDLQReason    = "stackstream-dlq-reason"
	HeaderDLQTopic     = "stackstream-dlq-topic"
	HeaderDLQPartition = "stackstream-dlq-partition"
	HeaderDLQOffset    = "stackstream-dlq-offset"
	HeaderDLQService   = "stackstream-dlq-service"
	// HeaderDLQTruncated is present when the record was cut to fit
	// DLQMaxRecordBytes: "value_len=N" (the original value's length), then
	// what was cut, e.g. "value_len=1572864 value_kept=917000 key_len=1048576
	// key_kept=4096 headers=5000 headers_kept=120 reason_len=9000". The
	// whole original is still at the coordinates of the other headers.
	HeaderDLQTruncated = "stackstream-dlq-truncated"
)

// dlqHeaderPrefix starts every header DLQRecord writes. Original headers
// under it are not copied, so a record that names its own reason cannot
// pass for another and a DLQ record sent to the DLQ again is not ambiguous.
const dlqHeaderPrefix = "stackstream-dlq-"

// Budget of a DLQ record. The broker takes large records, but a producer
// with franz-go's defaults refuses a record batch over 1,000,012 bytes
// (ProducerBatchMaxBytes) before sending it, and in a transaction that
// failure aborts the transaction: a DLQ copy of a big record must fit.
const (
	// DLQMaxRecordBytes bounds a DLQ record as franz-go sizes it on the
	// wire (key, value, headers and their length prefixes); the rest of
	// franz-go's limit is margin for the batch and request headers.
	DLQMaxRecordBytes = 900 << 10
	// MaxDLQReasonBytes caps the reason text.
	MaxDLQReasonBytes = 4 << 10
	// MaxDLQKeyBytes caps the key (a host ID: 256 bytes at most when valid).
	MaxDLQKeyBytes = 4 << 10
	// MaxDLQHeaderBytes caps the original headers kept (keys and values),
	// and MaxDLQHeaders their number; headers past either are dropped
	// whole, in order.
	MaxDLQHeaderBytes = 64 << 10
	MaxDLQHeaders     = 256
	// maxDLQTopicBytes caps the topic header (Kafka topic names are at most
	// 249 bytes; this is only for records built by hand).
	maxDLQTopicBytes = 255
)

// Upper bounds of what franz-go adds around a record's bytes: attributes,
// timestamp delta (varlong), offset delta, key and value lengths, header
// count and the record's length prefix (varints); a header's two lengths.
const (
	recordOverheadBytes = 1 + 10 + 5 + 5 + 5 + 5 + 5
	headerOverheadBytes = 5 + 5
)

// DLQRecord builds the DLQ record for orig, which service could not process
// for reason. The key is kept so one host's failures stay together. Key,
// original headers and value are cut so the record fits DLQMaxRecordBytes
// (see HeaderDLQTruncated); the DLQ headers are never cut, except that the
// reason is capped at MaxDLQReasonBytes.
func DLQRecord(dlqTopic, service string, orig *kgo.Record, reason error) *kgo.Record {
	msg := reason.Error()
	var cut []string
	if len(msg) > MaxDLQReasonBytes {
		cut = append(cut, "reason_len="+strconv.Itoa(len(msg)))
		msg = TruncateUTF8(msg, MaxDLQReasonBytes)
	}
	own := []kgo.RecordHeader{
		{Key: HeaderDLQReason, Value: []byte(msg)},
		{Key: HeaderDLQTopic, Value: []byte(TruncateUTF8(orig.Topic, maxDLQTopicBytes))},
		{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(orig.Partition)))},
		{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
		{Key: HeaderDLQService, Value: []byte(TruncateUTF8(service, maxDLQTopicBytes))},
	}

	key := orig.Key
	if len(key) > MaxDLQKeyBytes {
		cut = append(cut, "key_len="+strconv.Itoa(len(key)), "key_kept="+strconv.Itoa(MaxDLQKeyBytes))
		key = key[:MaxDLQKeyBytes]
	}

	h := make([]kgo.RecordHeader, 0, min(len(orig.Headers), MaxDLQHeaders)+len(own)+1)
	headerBytes, copied := 0, 0
	for _, oh := range orig.Headers {
		if strings.HasPrefix(oh.Key, dlqHeaderPrefix) {
			continue
		}
		copied++
		n := len(oh.Key) + len(oh.Value) + headerOverheadBytes
		if len(h) == MaxDLQHeaders || headerBytes+n > MaxDLQHeaderBytes {
			continue
		}
		h = append(h, oh)
		headerBytes += n
	}
	if len(h) < copied {
		cut = append(cut, "headers="+strconv.Itoa(copied), "headers_kept="+strconv.Itoa(len(h)))
	}
	h = append(h, own...)

	size := recordOverheadBytes + len(key) + headerBytes
	for _, oh := range own {
		size += len(oh.Key) + len(oh.Value) + headerOverheadBytes
	}
	// Room for the truncation header, whose value is known only at the end.
	const truncatedReserve = len(HeaderDLQTruncated) + headerOverheadBytes + 256
	value := orig.Value
	if room := DLQMaxRecordBytes - size - truncatedReserve; len(value) > room {
		cut = append(cut, "value_kept="+strconv.Itoa(room))
		value = value[:room]
	}
	if len(cut) > 0 {
		desc := "value_len=" + strconv.Itoa(len(orig.Value)) + " " + strings.Join(cut, " ")
		h = append(h, kgo.RecordHeader{Key: HeaderDLQTruncated, Value: []byte(desc)})
	}
	return &kgo.Record{Topic: dlqTopic, Key: key, Value: value, Headers: h}
}

// DLQRecordBytes is the size franz-go gives r on the wire, at most: what
// DLQRecord keeps under DLQMaxRecordBytes.
func DLQRecordBytes(r *kgo.Record) int {
	n := recordOverheadBytes + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + headerOverheadBytes
	}
	return n
}
