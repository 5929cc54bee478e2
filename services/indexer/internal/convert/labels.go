package convert

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/cache"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Labels that are document fields of their own, so not repeated in labels.*.
var promotedLabels = map[string]bool{record.LabelHost: true, record.LabelService: true}

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
	shared *cache.Bounded[string, *labelSet] // by exactLabelKey
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
	ls, ok := c.shared.Get(string(exact))
	if !ok {
		ls = newLabelSet(raw, headerHost)
		c.shared.Put(string(exact), ls, ls.size+len(exact))
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
	ls.err = CheckHost(ls.host)
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
