package indices

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// KindServiceGroups is a settled hour's service documents of one type over
// the whole fleet in one document (resolution 1h, no service or host):
// every (service, host) group's 10-minute sums and hour sum (Groups,
// EncodeServiceGroups), so a chart of a day reads 24 documents instead of
// 144,000 (schemas/opensearch.md, "Service groups"). Sources is the
// fingerprint of the service documents it was made from
// (ServiceGroupsSources); Value the sum of their 10-minute values.
const KindServiceGroups = "service_groups"

// ServiceGroup is one (service, host) group of an hour: Ten[w] sums the
// value of its 10-minute service documents starting at minute 10*w, Hour
// its hourly documents'. Present has bit w set when a 10-minute document
// starts at minute 10*w, and bit 6 when an hourly document exists (its
// window starts at minute 0). Host "" is a group without a host (the
// rollup omits an empty host).
type ServiceGroup struct {
	Service, Host string
	Present       uint8
	Ten           [6]int64
	Hour          int64
}

// PresentHour is ServiceGroup.Present's bit of the hourly document.
const PresentHour = 1 << 6

// ServiceGroupsSources is the fingerprint of an hour's service documents
// of one type: the count and the sum of the _seq_no of its 10-minute
// documents and of its hourly ones (ServiceGroupsCheck). A rewrite gives
// a document a higher _seq_no and a document added or deleted changes a
// count, so the fingerprint changes with any of them; the query uses a
// KindServiceGroups document only when its Sources equals the fingerprint
// of the hour's documents as they are. (Sums of values would not do: a
// fleet's hour sums past 2^53 ns, where OpenSearch's double sums round.)
func ServiceGroupsSources(tenDocs, tenSeqNos, hourDocs, hourSeqNos int64) string {
	return "10m:" + strconv.FormatInt(tenDocs, 10) + ":" + strconv.FormatInt(tenSeqNos, 10) +
		"/1h:" + strconv.FormatInt(hourDocs, 10) + ":" + strconv.FormatInt(hourSeqNos, 10)
}

// ServiceGroupsCheckAggs are the aggregations, over one hour's service
// documents of one type (e.g. under an hourly date_histogram), whose
// answer ServiceGroupsCheck reads.
func ServiceGroupsCheckAggs() map[string]any {
	of := func(res string) map[string]any {
		return map[string]any{
			"filter": map[string]any{"bool": map[string]any{"filter": []any{
				map[string]any{"term": map[string]any{"kind": KindService}},
				map[string]any{"term": map[string]any{"resolution": res}},
			}}},
			"aggs": map[string]any{"seq_nos": map[string]any{"sum": map[string]any{"field": "_seq_no"}}},
		}
	}
	return map[string]any{"ten": of(ResolutionTenMinutes), "hour": of(ResolutionHour)}
}

// ServiceGroupsCheck is the answer of ServiceGroupsCheckAggs.
type ServiceGroupsCheck struct {
	Ten  seqNos `json:"ten"`
	Hour seqNos `json:"hour"`
}

type seqNos struct {
	DocCount int64 `json:"doc_count"`
	SeqNos   struct {
		Value float64 `json:"value"`
	} `json:"seq_nos"`
}

// Sources is the fingerprint of the documents c counted.
func (c ServiceGroupsCheck) Sources() string {
	return ServiceGroupsSources(c.Ten.DocCount, int64(c.Ten.SeqNos.Value), c.Hour.DocCount, int64(c.Hour.SeqNos.Value))
}

// EncodeServiceGroups packs groups: a uvarint count, then per group its
// service and host (uvarint length and bytes), Present, the six 10-minute
// sums and the hour sum (zigzag varints).
func EncodeServiceGroups(groups []ServiceGroup) []byte {
	b := binary.AppendUvarint(nil, uint64(len(groups)))
	for _, g := range groups {
		b = binary.AppendUvarint(b, uint64(len(g.Service)))
		b = append(b, g.Service...)
		b = binary.AppendUvarint(b, uint64(len(g.Host)))
		b = append(b, g.Host...)
		b = append(b, g.Present)
		for _, v := range g.Ten {
			b = binary.AppendVarint(b, v)
		}
		b = binary.AppendVarint(b, g.Hour)
	}
	return b
}

// ErrServiceGroups is wrapped by DecodeServiceGroups' errors.
var ErrServiceGroups = errors.New("bad service groups")

// DecodeServiceGroups unpacks EncodeServiceGroups' bytes.
func DecodeServiceGroups(b []byte) ([]ServiceGroup, error) {
	n, k := binary.Uvarint(b)
	// A group takes at least 10 bytes.
	if k <= 0 || n > uint64(len(b)-k)/10 {
		return nil, fmt.Errorf("%w: count", ErrServiceGroups)
	}
	b = b[k:]
	str := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	num := func() (int64, bool) {
		v, k := binary.Varint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	out := make([]ServiceGroup, n)
	for i := range out {
		g := &out[i]
		var ok bool
		if g.Service, ok = str(); !ok {
			return nil, fmt.Errorf("%w: group %d: service", ErrServiceGroups, i)
		}
		if g.Host, ok = str(); !ok || len(b) == 0 {
			return nil, fmt.Errorf("%w: group %d: host", ErrServiceGroups, i)
		}
		g.Present, b = b[0], b[1:]
		for w := range g.Ten {
			if g.Ten[w], ok = num(); !ok {
				return nil, fmt.Errorf("%w: group %d: values", ErrServiceGroups, i)
			}
		}
		if g.Hour, ok = num(); !ok {
			return nil, fmt.Errorf("%w: group %d: values", ErrServiceGroups, i)
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the groups", ErrServiceGroups, len(b))
	}
	return out, nil
}

// ServiceGroupsBuilder gathers one hour's service documents of one type
// (or sums of them) into its KindServiceGroups document.
type ServiceGroupsBuilder struct {
	groups map[[2]string]*ServiceGroup
	tenSum int64
}

// Add adds docs service documents of resolution res (10m or 1h; others
// are ignored) of the group (service, host) starting at start, whose
// values sum to value. The query checks, per selection, that an hour's
// 10-minute values add up to its hourly ones (as it does with the
// documents themselves): a document is written for any hour.
func (b *ServiceGroupsBuilder) Add(service, host, res string, start time.Time, docs, value int64) {
	if docs == 0 || (res != ResolutionTenMinutes && res != ResolutionHour) {
		return
	}
	if b.groups == nil {
		b.groups = map[[2]string]*ServiceGroup{}
	}
	k := [2]string{service, host}
	g := b.groups[k]
	if g == nil {
		g = &ServiceGroup{Service: service, Host: host}
		b.groups[k] = g
	}
	if res == ResolutionHour {
		g.Present |= PresentHour
		g.Hour += value
		return
	}
	w := start.UTC().Minute() / 10
	g.Present |= 1 << w
	g.Ten[w] += value
	b.tenSum += value
}

// Doc is the KindServiceGroups document of the hour, groups in (service,
// host) order, made from the documents of fingerprint sources.
func (b *ServiceGroupsBuilder) Doc(typ string, hour time.Time, sources string) RollupDoc {
	groups := make([]ServiceGroup, 0, len(b.groups))
	for _, g := range b.groups {
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(x, y ServiceGroup) int {
		return cmp.Or(cmp.Compare(x.Service, y.Service), cmp.Compare(x.Host, y.Host))
	})
	return RollupDoc{
		Timestamp: hour.UTC(), Resolution: ResolutionHour, Kind: KindServiceGroups, Type: typ,
		Value: b.tenSum, Groups: EncodeServiceGroups(groups),
		Sources: sources,
	}
}
