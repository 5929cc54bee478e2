package otlp

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stackstream/stackstream/schemas/record"
)

// ErrInvalid: the request is not an ExportProfilesServiceRequest, or its
// references do not hold together.
var ErrInvalid = errors.New("invalid OTLP profiles request")

// Limits bound one ExportProfilesServiceRequest. Check counts what the
// protobuf holds before pdata's decoder allocates anything: a message of a
// few bytes on the wire becomes a struct of a hundred on the heap, so the
// body limit alone does not bound the decode.
type Limits struct {
	// MaxProfiles bounds the resource, scope and profile messages together.
	MaxProfiles int
	// MaxSamples bounds the samples of all profiles.
	MaxSamples int
	// MaxSampleValues bounds the values and timestamps of all samples.
	MaxSampleValues int
	// MaxStacks, MaxLocations, MaxFunctions, MaxMappings, MaxLinks and
	// MaxAttributes bound the dictionary's tables.
	MaxStacks, MaxLocations, MaxFunctions, MaxMappings, MaxLinks, MaxAttributes int
	// MaxLocationRefs bounds the location indices of all stacks.
	MaxLocationRefs int
	// MaxLines bounds the lines of all locations.
	MaxLines int
	// MaxAttributeRefs bounds the attribute indices of samples, locations,
	// mappings and profiles together.
	MaxAttributeRefs int
	// MaxStrings bounds the string table; MaxStringBytes any one string.
	MaxStrings, MaxStringBytes int
	// MaxKeyValues bounds resource and scope attributes and the values
	// nested in any attribute; MaxValueDepth their nesting.
	MaxKeyValues, MaxValueDepth int
	// MaxDecodeHeapBytes bounds the heap the decode is estimated to take.
	MaxDecodeHeapBytes int64
}

// DefaultLimits are within the record limits (record.DefaultLimits), so
// one request's profiles fit what the consumers accept.
func DefaultLimits() Limits {
	r := record.DefaultLimits()
	return Limits{
		MaxProfiles:        4096,
		MaxSamples:         r.MaxSamples,
		MaxSampleValues:    4 * r.MaxSamples,
		MaxStacks:          r.MaxSamples,
		MaxLocations:       r.MaxLocations,
		MaxFunctions:       r.MaxFunctions,
		MaxMappings:        r.MaxMappings,
		MaxLinks:           r.MaxSamples,
		MaxAttributes:      1 << 18,
		MaxLocationRefs:    r.MaxSampleLocations,
		MaxLines:           r.MaxLines,
		MaxAttributeRefs:   r.MaxLabels,
		MaxStrings:         r.MaxStrings,
		MaxStringBytes:     r.MaxStringBytes,
		MaxKeyValues:       1 << 16,
		MaxValueDepth:      8,
		MaxDecodeHeapBytes: 256 << 20,
	}
}

// kind is what a counted element is; cost is its estimated heap in bytes
// once decoded (TestHeapEstimate checks these against pdata's decoder).
type kind int

const (
	kProfile kind = iota
	kSample
	kSampleValue
	kStack
	kLocationRef
	kLocation
	kLine
	kFunction
	kMapping
	kLink
	kAttribute
	kAttributeRef
	kString
	kKeyValue
	nKinds
)

var kindNames = [nKinds]string{"resource, scope and profile messages", "samples", "sample values and timestamps", "stacks",
	"stack location references", "locations", "lines", "functions", "mappings", "links", "attributes",
	"attribute references", "strings", "resource and scope attributes and nested values"}

var kindCost = [nKinds]int64{kProfile: 1024, kSample: 192, kSampleValue: 16, kStack: 96, kLocationRef: 8, kLocation: 192,
	kLine: 96, kFunction: 96, kMapping: 160, kLink: 96, kAttribute: 160, kAttributeRef: 8, kString: 112, kKeyValue: 160}

func (l Limits) max(k kind) int {
	switch k {
	case kProfile:
		return l.MaxProfiles
	case kSample:
		return l.MaxSamples
	case kSampleValue:
		return l.MaxSampleValues
	case kStack:
		return l.MaxStacks
	case kLocationRef:
		return l.MaxLocationRefs
	case kLocation:
		return l.MaxLocations
	case kLine:
		return l.MaxLines
	case kFunction:
		return l.MaxFunctions
	case kMapping:
		return l.MaxMappings
	case kLink:
		return l.MaxLinks
	case kAttribute:
		return l.MaxAttributes
	case kAttributeRef:
		return l.MaxAttributeRefs
	case kString:
		return l.MaxStrings
	}
	return l.MaxKeyValues
}

// field is what the walk knows of one field of a message: a nested
// message (counted as kind), a packed list of varints or fixed64s
// (each element counted as kind), or a string (kind kString when it is
// a table entry, else only its length is checked).
type field struct {
	msg    message
	packed bool // varints, or fixed64 when fixed
	fixed  bool
	str    bool
	kind   kind
	count  bool
}

type message map[protowire.Number]field

// The messages of profiles_service.proto, profiles.proto, common.proto and
// resource.proto (v1development as pdata v1.71.0 reads it); fields not
// listed are scalars or bytes, bounded by the body.
var (
	anyValue     = message{}
	keyValue     = message{1: {str: true}, 2: {msg: anyValue, kind: kKeyValue, count: false}}
	arrayValue   = message{1: {msg: anyValue, kind: kKeyValue, count: true}}
	keyValueList = message{1: {msg: keyValue, kind: kKeyValue, count: true}}
	entityRef    = message{1: {str: true}, 2: {str: true}, 3: {str: true, kind: kKeyValue, count: true}, 4: {str: true, kind: kKeyValue, count: true}}
	resource     = message{1: {msg: keyValue, kind: kKeyValue, count: true}, 3: {msg: entityRef, kind: kKeyValue, count: true}}
	scope        = message{1: {str: true}, 2: {str: true}, 3: {msg: keyValue, kind: kKeyValue, count: true}}
	valueType    = message{}
	sample       = message{2: {packed: true, kind: kAttributeRef, count: true}, 4: {packed: true, kind: kSampleValue, count: true},
		5: {packed: true, fixed: true, kind: kSampleValue, count: true}}
	profileMsg = message{1: {msg: valueType}, 2: {msg: sample, kind: kSample, count: true}, 5: {msg: valueType},
		9: {str: true}, 11: {packed: true, kind: kAttributeRef, count: true}}
	scopeProfiles    = message{1: {msg: scope}, 2: {msg: profileMsg, kind: kProfile, count: true}, 3: {str: true}}
	resourceProfiles = message{1: {msg: resource}, 2: {msg: scopeProfiles, kind: kProfile, count: true}, 3: {str: true}}
	mapping          = message{5: {packed: true, kind: kAttributeRef, count: true}}
	line             = message{}
	location         = message{3: {msg: line, kind: kLine, count: true}, 4: {packed: true, kind: kAttributeRef, count: true}}
	function         = message{}
	link             = message{}
	keyValueAndUnit  = message{2: {msg: anyValue}}
	stack            = message{1: {packed: true, kind: kLocationRef, count: true}}
	dictionary       = message{1: {msg: mapping, kind: kMapping, count: true}, 2: {msg: location, kind: kLocation, count: true},
		3: {msg: function, kind: kFunction, count: true}, 4: {msg: link, kind: kLink, count: true},
		5: {str: true, kind: kString, count: true}, 6: {msg: keyValueAndUnit, kind: kAttribute, count: true},
		7: {msg: stack, kind: kStack, count: true}}
	exportRequest = message{1: {msg: resourceProfiles, kind: kProfile, count: true}, 2: {msg: dictionary}}
)

func init() {
	// AnyValue refers to itself through arrays and key-value lists.
	anyValue[1] = field{str: true}
	anyValue[5] = field{msg: arrayValue}
	anyValue[6] = field{msg: keyValueList}
}

// Check walks an ExportProfilesServiceRequest's protobuf and refuses it
// (record.ErrTooLarge) when it holds more of anything than l allows or
// its decode is estimated to take more than l.MaxDecodeHeapBytes, and
// (ErrInvalid) when it is not protobuf. It allocates nothing.
func Check(raw []byte, l Limits) error {
	var counts [nKinds]int
	if err := walk(raw, exportRequest, 0, l, &counts); err != nil {
		return err
	}
	var heap int64
	for k, n := range counts {
		heap += int64(n) * kindCost[k]
	}
	if heap > l.MaxDecodeHeapBytes {
		return fmt.Errorf("%w: decoding the request would take about %d MiB, limit %d MiB", record.ErrTooLarge, heap>>20, l.MaxDecodeHeapBytes>>20)
	}
	return nil
}

func walk(b []byte, m message, depth int, l Limits, counts *[nKinds]int) error {
	if depth > 8+2*l.MaxValueDepth {
		return fmt.Errorf("%w: attribute values nested deeper than %d", record.ErrTooLarge, l.MaxValueDepth)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrInvalid, protowire.ParseError(n))
		}
		b = b[n:]
		f, known := m[num]
		if typ != protowire.BytesType || !known {
			if known && f.count && (typ == protowire.VarintType || typ == protowire.Fixed64Type) {
				// A repeated scalar sent unpacked: one element.
				if err := add(counts, f.kind, 1, l); err != nil {
					return err
				}
			}
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return fmt.Errorf("%w: %v", ErrInvalid, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrInvalid, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case f.msg != nil:
			if f.count {
				if err := add(counts, f.kind, 1, l); err != nil {
					return err
				}
			}
			if err := walk(v, f.msg, depth+1, l, counts); err != nil {
				return err
			}
		case f.packed:
			elems := len(v) / 8
			if !f.fixed {
				elems = 0
				for _, c := range v {
					if c < 0x80 {
						elems++
					}
				}
			}
			if err := add(counts, f.kind, elems, l); err != nil {
				return err
			}
		case f.str:
			if len(v) > l.MaxStringBytes {
				return fmt.Errorf("%w: a string of %d bytes, limit %d", record.ErrTooLarge, len(v), l.MaxStringBytes)
			}
			if f.count {
				if err := add(counts, f.kind, 1, l); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func add(counts *[nKinds]int, k kind, n int, l Limits) error {
	counts[k] += n
	if counts[k] > l.max(k) {
		return fmt.Errorf("%w: more than %d %s in one request", record.ErrTooLarge, l.max(k), kindNames[k])
	}
	return nil
}
