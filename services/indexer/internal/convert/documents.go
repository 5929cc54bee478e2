package convert

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Documents are what one profile becomes in OpenSearch.
type Documents struct {
	Stacks  []Stack
	Samples []Sample
	// At is the profile's time, which chose the samples index.
	At time.Time
	// Labels counts what the label rules changed in Samples.
	Labels LabelDrops
}

// Stack is a distinct stack of a profile. Its document is encoded only when
// needed (Doc): most stacks were stored before and are not sent again.
type Stack struct {
	ID     string
	Frames []indices.Frame
	At     time.Time
	// Known is set, and Frames nil, when Record's Known reported the stack
	// stored for At's day: it has no document to write.
	Known bool
}

// Doc is the stacks-index document of s.
func (s Stack) Doc() ([]byte, error) {
	doc, err := json.Marshal(stackDoc(s.Frames, s.At))
	if err != nil {
		return nil, fmt.Errorf("encode stack %s: %w", s.ID, err)
	}
	return doc, nil
}

// stackDoc is the document of a stack: its frames and what the stacks'
// retention and the kinds search read. The functions, leaf and depth
// fields of the mapping are left out: nothing reads them, and their
// postings and doc values cost bytes on every stack of a fleet.
func stackDoc(frames []indices.Frame, at time.Time) indices.StackDoc {
	return indices.StackDoc{Timestamp: at, Frames: frames, Kinds: indices.StackKinds(frames), LastSeen: indices.DayOf(at)}
}

// Sample is one samples-index document: the samples of a profile with the
// same label set, summed by stack.
type Sample struct {
	Index string
	ID    string
	Doc   []byte
	// Raw is how many raw samples the document represents (Count); the
	// benchmark divides the store size by it.
	Raw int64
}

// MaxLabelsPerSample caps the labels of a samples document (besides host and
// service): the contract labels are kept first, then the others in key
// order; the rest are dropped and counted (LabelDrops.TooMany).
const MaxLabelsPerSample = 64

// LabelDrops counts label changes, once per samples document they apply to:
// keys outside record.ValidLabelKey dropped, values cut to
// record.MaxLabelValueBytes, labels past MaxLabelsPerSample dropped, and
// services cut to record.MaxServiceBytes.
type LabelDrops struct {
	InvalidKey, ValueTruncated, TooMany, ServiceTruncated int
}

func (l *LabelDrops) add(o LabelDrops) {
	l.InvalidKey += o.InvalidKey
	l.ValueTruncated += o.ValueTruncated
	l.TooMany += o.TooMany
	l.ServiceTruncated += o.ServiceTruncated
}

// The samples documents of one record may take docBudgetBase plus
// docBudgetPerByte bytes of JSON per byte of its protobuf (decompressed), up
// to maxDocBytes, counted as they are built (the label sets' fields, then the
// documents): labels reach the string table by index, so a small record could
// otherwise name the same 512-byte values in millions of documents. Real
// profiles stay below: a 19 Hz agent profile of 130 KB makes about 40 KB of
// documents; a memory profile of 5,000 processes on a host with a 60-byte
// name, 8 bytes per protobuf byte.
const (
	docBudgetBase    = 256 << 10
	docBudgetPerByte = 16
	maxDocBytes      = 32 << 20
)

// docBudget is the budget of the documents of a protobuf of rawLen bytes.
func docBudget(rawLen int) int { return min(docBudgetBase+docBudgetPerByte*rawLen, maxDocBytes) }

func errDocumentsTooLarge(budget int) error {
	return fmt.Errorf("%w: the samples documents of the record take more than %d bytes of JSON", record.ErrTooLarge, budget)
}

// header is what the documents of one profile share, for Convert and the
// fast path alike.
type header struct {
	valueIdx int // the sample value documents store
	countIdx int // the samples/count value (raw samples), -1 when absent
	at       time.Time
	index    string // the samples index of at
	part     string // record.HeaderPart: part of the sample IDs
}

// newHeader reads p's sample types, default sample type and time; fallback
// is the time when p carries none.
func newHeader(names indices.Names, meta record.Meta, part string, p *profile.Profile, fallback time.Time) header {
	at := fallback
	if p.TimeNanos > 0 {
		at = time.Unix(0, p.TimeNanos)
	}
	at = at.UTC()
	return header{valueIdx: pprofx.ValueIndex(p, string(meta.Type)), countIdx: pprofx.CountIndex(p), at: at, index: names.Samples(at), part: part}
}

// sample is the document d of label set ls with its stacks ids and values,
// representing raw raw samples.
func (h header) sample(d *indices.SampleDoc, ls *labelSet, ids []string, values []int64, raw int64) (Sample, error) {
	if err := d.SetStacks(ids, values); err != nil {
		return Sample{}, err
	}
	return h.encode(d, ls, raw), nil
}

// encode is the document d of label set ls, its stacks set, representing
// raw raw samples.
func (h header) encode(d *indices.SampleDoc, ls *labelSet, raw int64) Sample {
	id := indices.SampleIDPart(d.Host, d.Type, h.at, h.part, ls.idLabels)
	return Sample{Index: h.index, ID: id, Doc: appendSampleDoc(make([]byte, 0, sampleDocSize(d, ls.fields)), d, ls.fields), Raw: raw}
}

// sampleDocSize is about the size of d's JSON with its label fields, so
// that appendSampleDoc grows its buffer once or not at all.
func sampleDocSize(d *indices.SampleDoc, labelFields []byte) int {
	n := 160 + len(d.Type) + len(d.Host) + len(d.Service) + base64.StdEncoding.EncodedLen(len(d.StackValues)) + len(labelFields)
	for _, id := range d.StackIDs {
		n += len(id) + 3
	}
	return n
}

// appendSampleDoc encodes d as json.Marshal would (labels in key order),
// without reflection: it runs once per document on the hot path. Its label
// fields are labelFields, appendLabelFields of d computed once per label set.
func appendSampleDoc(b []byte, d *indices.SampleDoc, labelFields []byte) []byte {
	b = append(b, `{"@timestamp":"`...)
	b = d.Timestamp.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendString(b, d.Type)
	b = append(b, `,"host":`...)
	b = appendString(b, d.Host)
	b = append(b, `,"service":`...)
	b = appendString(b, d.Service)
	if len(d.StackIDs) > 0 {
		b = append(b, `,"stack_id":[`...)
		for i, id := range d.StackIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, `],"stack_values":"`...)
		b = base64.StdEncoding.AppendEncode(b, d.StackValues)
		b = append(b, '"')
	}
	b = append(b, `,"value":`...)
	b = strconv.AppendInt(b, d.Value, 10)
	if d.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, d.Count, 10)
	}
	b = append(b, labelFields...)
	return append(b, '}')
}

// appendLabelFields appends the labels, label_pairs and label_names fields
// of d, each with its leading comma, as json.Marshal would.
func appendLabelFields(b []byte, d *indices.SampleDoc) []byte {
	if len(d.Labels) > 0 {
		b = append(b, `,"labels":{`...)
		for i, k := range sortedKeys(d.Labels) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, d.Labels[k])
		}
		b = append(b, '}')
	}
	for _, f := range []struct {
		name   string
		values []string
	}{{`,"label_pairs":[`, d.LabelPairs}, {`,"label_names":[`, d.LabelNames}} {
		if len(f.values) == 0 {
			continue
		}
		b = append(b, f.name...)
		for i, v := range f.values {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, v)
		}
		b = append(b, ']')
	}
	return b
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	if !jsonPlain(s) {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonPlain reports whether s goes into a JSON string as it is: no control
// byte, quote, backslash or non-ASCII byte. It tests 8 bytes at a time (a
// samples document has a hundred stack IDs of 16 bytes), with the
// has-zero-byte bit tricks: for each byte, x-0x01 borrows into its high
// bit only when it was 0, and x-0x20 only when it was below 0x20.
func jsonPlain(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		quote, backslash := x^('"'*ones), x^('\\'*ones)
		bad := x | (x - 0x20*ones) | ((quote - ones) &^ quote) | ((backslash - ones) &^ backslash)
		if bad&highs != 0 {
			return false
		}
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}
