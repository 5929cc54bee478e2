package indexer

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

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

// errHostTooLong: a host name longer than record.MaxHostBytes is not a real
// host's, and cutting it could merge two hosts: the record goes to the DLQ.
var errHostTooLong = errors.New("host name too long")

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

// Stack is a distinct stack of a profile. Its document is encoded only when
// needed (Doc): most stacks were stored before and are not sent again.
type Stack struct {
	ID     string
	Frames []indices.Frame
	At     time.Time
}

// Doc is the stacks-index document of s.
func (s Stack) Doc() ([]byte, error) {
	doc, err := json.Marshal(stackDoc(s.Frames, s.At))
	if err != nil {
		return nil, fmt.Errorf("encode stack %s: %w", s.ID, err)
	}
	return doc, nil
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

// Labels that are document fields of their own, so not repeated in labels.*.
var promotedLabels = map[string]bool{record.LabelHost: true, record.LabelService: true}

// Convert turns a decoded profile into documents. host comes from the record
// header (or the sample's host label when the header is empty); part is the
// record's record.HeaderPart ("" when the profile was not split); fallback
// is the time used when the profile carries none (the record's timestamp).
func Convert(names indices.Names, meta record.Meta, part string, p *profile.Profile, fallback time.Time) (Documents, error) {
	return convert(names, meta, part, p, fallback, math.MaxInt)
}

// convert is Convert whose samples documents may take at most budget bytes.
func convert(names indices.Names, meta record.Meta, part string, p *profile.Profile, fallback time.Time, budget int) (Documents, error) {
	if len(p.SampleType) == 0 {
		return Documents{}, fmt.Errorf("profile has no sample types")
	}
	h := newHeader(names, meta, part, p, fallback)
	valueIdx, countIdx, at := h.valueIdx, h.countIdx, h.at

	// One document per label set (a process, mostly) with every stack it
	// was seen in: see schemas/indices/stackvalues.go.
	type agg struct {
		doc    indices.SampleDoc
		raw    int64
		ls     *labelSet
		stacks map[string]int // stack ID -> index in ids and values
		ids    []string
		values []int64
	}
	labelSets := labelSets{}
	merged := map[string]*agg{} // by labelSet.key
	var order []*agg
	docs := Documents{At: at}
	seenStack := map[string]bool{}
	stackByLocs := map[string]string{}
	var locKey []byte
	for _, s := range p.Sample {
		if valueIdx >= len(s.Value) {
			return Documents{}, fmt.Errorf("sample has %d values, profile declares %d sample types", len(s.Value), len(p.SampleType))
		}
		v := s.Value[valueIdx]
		if v < 0 {
			return Documents{}, fmt.Errorf("sample has a negative value %d", v)
		}
		// Samples of one stack in several processes share their locations:
		// frames and hash are computed once per location sequence. Locations
		// are keyed by address, not by their ID, which a broken profile may
		// repeat; the profile outlives this loop, so addresses are stable.
		locKey = locKey[:0]
		for _, loc := range s.Location {
			locKey = binary.LittleEndian.AppendUint64(locKey, uint64(uintptr(unsafe.Pointer(loc))))
		}
		stackID, ok := stackByLocs[string(locKey)]
		if !ok {
			if frames := pprofx.StackFrames(s); len(frames) > 0 {
				stackID = indices.StackID(frames)
				if !seenStack[stackID] {
					seenStack[stackID] = true
					docs.Stacks = append(docs.Stacks, Stack{ID: stackID, Frames: frames, At: at})
				}
			}
			stackByLocs[string(locKey)] = stackID
		}
		ls := labelSets.get(s.Label, meta.Host)
		if ls.err != nil {
			return Documents{}, ls.err
		}
		if labelSets.bytes > budget {
			return Documents{}, errDocumentsTooLarge(budget)
		}
		raw := int64(1)
		if countIdx >= 0 && countIdx < len(s.Value) {
			raw = s.Value[countIdx]
		}
		a := merged[ls.key]
		if a == nil {
			a = &agg{doc: ls.doc(at, meta.Type), ls: ls, stacks: map[string]int{}}
			merged[ls.key] = a
			order = append(order, a)
			docs.Labels.add(ls.drops)
		}
		a.doc.Value += v
		a.doc.Count += raw
		a.raw += raw
		if stackID == "" {
			continue // counted in the total only (memory samples have no stack)
		}
		i, ok := a.stacks[stackID]
		if !ok {
			i = len(a.ids)
			a.stacks[stackID] = i
			a.ids = append(a.ids, stackID)
			a.values = append(a.values, 0)
		}
		a.values[i] += v
	}
	docs.Samples = make([]Sample, 0, len(order))
	size := 0
	for _, a := range order {
		sample, err := h.sample(&a.doc, a.ls, a.ids, a.values, a.raw)
		if err != nil {
			return Documents{}, err
		}
		if size += len(sample.Doc); size > budget {
			return Documents{}, errDocumentsTooLarge(budget)
		}
		docs.Samples = append(docs.Samples, sample)
	}
	return docs, nil
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

func stackDoc(frames []indices.Frame, at time.Time) indices.StackDoc {
	seen := make(map[string]bool, len(frames))
	fns := make([]string, 0, len(frames))
	for _, f := range frames {
		if !seen[f.Function] {
			seen[f.Function] = true
			fns = append(fns, f.Function)
		}
	}
	return indices.StackDoc{Timestamp: at, Frames: frames, Functions: fns, Leaf: frames[0].Function, Depth: len(frames), Kinds: indices.StackKinds(frames)}
}

// labelSet is what a sample's labels become, computed once per distinct
// label set of a profile (a profile repeats a process's labels on every one
// of its samples).
type labelSet struct {
	host, service string
	// labels is the document's label fields (SampleDoc.SetLabels of the
	// labels kept) and fields their JSON, ready to append.
	labels   indices.SampleDoc
	fields   []byte
	key      string            // canonical: host, service, labels
	idLabels map[string]string // labels + service: the sample ID's label part
	drops    LabelDrops
	err      error // the host is too long: the record goes to the DLQ
	size     int   // about the bytes ls holds, for the caches' budget
}

// doc is a samples document of ls at, without values yet.
func (ls *labelSet) doc(at time.Time, typ record.ProfileType) indices.SampleDoc {
	return indices.SampleDoc{Timestamp: at, Type: string(typ), Host: ls.host, Service: ls.service,
		Labels: ls.labels.Labels, LabelPairs: ls.labels.LabelPairs, LabelNames: ls.labels.LabelNames}
}

// labelSets caches labelSet by the raw labels of a sample, for one profile.
type labelSets struct {
	byRaw map[string]*labelSet
	keys  []string
	buf   []byte
	// shared, when set, keeps label sets across profiles (the fast path's):
	// a host's processes send the same labels every 10 s, and building a
	// labelSet (maps, service, canonical key) cost more than the rest of
	// a document.
	shared *boundedMap[string, *labelSet] // by exactLabelKey
	// bytes is the label fields' JSON of the distinct label sets got, so
	// far: what the profile's documents will at least take.
	bytes int
}

// exactLabelKey is an unambiguous key of raw (its sorted keys in keys) and
// headerHost: every string is length-prefixed, unlike labelSets.buf whose
// separators a label could contain. labelSets.buf stays the per-profile key
// so that both decode paths merge label sets alike.
func exactLabelKey(b []byte, raw map[string][]string, keys []string, headerHost string) []byte {
	b = binary.AppendUvarint(b, uint64(len(headerHost)))
	b = append(b, headerHost...)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		v := raw[k]
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, x := range v {
			b = binary.AppendUvarint(b, uint64(len(x)))
			b = append(b, x...)
		}
	}
	return b
}

func (c *labelSets) get(raw map[string][]string, headerHost string) *labelSet {
	c.keys = c.keys[:0]
	for k := range raw {
		c.keys = append(c.keys, k)
	}
	slices.Sort(c.keys)
	c.buf = c.buf[:0]
	for _, k := range c.keys {
		c.buf = append(c.buf, k...)
		c.buf = append(c.buf, 0)
		if v := raw[k]; len(v) > 0 {
			c.buf = append(c.buf, v[0]...)
		}
		c.buf = append(c.buf, 0)
	}
	if ls, ok := c.byRaw[string(c.buf)]; ok {
		return ls
	}
	if c.byRaw == nil {
		c.byRaw = map[string]*labelSet{}
	}
	if c.shared == nil {
		ls := newLabelSet(raw, headerHost)
		c.byRaw[string(c.buf)] = ls
		c.bytes += len(ls.fields)
		return ls
	}
	n := len(c.buf)
	c.buf = exactLabelKey(c.buf, raw, c.keys, headerHost)
	exact := c.buf[n:]
	ls, ok := c.shared.get(string(exact))
	if !ok {
		ls = newLabelSet(raw, headerHost)
		c.shared.put(string(exact), ls, ls.size+len(exact))
	}
	c.byRaw[string(c.buf[:n])] = ls
	c.bytes += len(ls.fields)
	return ls
}

// newLabelSet builds the labelSet of raw labels: host and service promoted
// to fields of their own, empty values dropped, then the label rules (see
// LabelDrops) applied.
func newLabelSet(raw map[string][]string, headerHost string) *labelSet {
	labels := record.Labels(raw)
	ls := &labelSet{host: headerHost, service: record.DeriveService(labels)}
	if ls.host == "" {
		ls.host = labels[record.LabelHost]
	}
	if len(ls.host) > record.MaxHostBytes {
		ls.err = fmt.Errorf("%w: %d bytes, at most %d: %q...", errHostTooLong, len(ls.host), record.MaxHostBytes, record.TruncateUTF8(ls.host, 64))
	}
	if len(ls.service) > record.MaxServiceBytes {
		ls.service = record.TruncateUTF8(ls.service, record.MaxServiceBytes)
		ls.drops.ServiceTruncated++
	}
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		if promotedLabels[k] || v == "" {
			continue
		}
		if !record.ValidLabelKey(k) {
			ls.drops.InvalidKey++
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The contract labels first (at most len(record.ContractLabels)), then
	// the others in key order up to the cap.
	kept := make(map[string]string, min(len(keys), MaxLabelsPerSample)+1)
	for pass := range 2 {
		for _, k := range keys {
			if record.IsContractLabel(k) != (pass == 0) {
				continue
			}
			if len(kept) == MaxLabelsPerSample {
				ls.drops.TooMany++
				continue
			}
			v := labels[k]
			if len(v) > record.MaxLabelValueBytes {
				v = record.TruncateUTF8(v, record.MaxLabelValueBytes)
				ls.drops.ValueTruncated++
			}
			kept[k] = v
		}
	}
	ls.key = ls.host + "\x00" + ls.service + "\x00" + labelKey(kept)
	ls.labels.SetLabels(kept)
	ls.fields = appendLabelFields(nil, &ls.labels)
	// The service is part of the identity too: a label set without it would
	// merge two services' samples of one stack.
	kept[record.LabelService] = ls.service
	ls.idLabels = kept
	ls.size = 256 + len(ls.host) + 2*len(ls.service) + 3*len(ls.key) + len(ls.fields)
	return ls
}

// labelKey is a canonical string of a label set, for merging.
func labelKey(l map[string]string) string {
	keys := sortedKeys(l)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(l[k])
		b.WriteByte(0)
	}
	return b.String()
}

func sortedKeys(l map[string]string) []string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
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
