package record

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers of a DLQ record, added to the original record's headers. The DLQ
// value is the original value, unchanged, so it can be inspected or replayed.
const (
	HeaderDLQReason    = "stackstream-dlq-reason"
	HeaderDLQTopic     = "stackstream-dlq-topic"
	HeaderDLQPartition = "stackstream-dlq-partition"
	HeaderDLQOffset    = "stackstream-dlq-offset"
	HeaderDLQService   = "stackstream-dlq-service"
)

// DLQRecord builds the DLQ record for orig, which service could not process
// for reason. The key is kept so one host's failures stay together.
func DLQRecord(dlqTopic, service string, orig *kgo.Record, reason error) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(orig.Headers)+5)
	h = append(h, orig.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(reason.Error())},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(orig.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(orig.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQService, Value: []byte(service)},
	)
	return &kgo.Record{Topic: dlqTopic, Key: orig.Key, Value: orig.Value, Headers: h}
}
