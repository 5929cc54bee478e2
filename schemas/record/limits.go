package record

import (
	"errors"
	"fmt"
)

// Limits bound what one profile record may make a consumer allocate. A pprof
// protobuf is compact: an empty sample is 2 bytes on the wire and a
// *profile.Sample on the heap, a label 6 bytes and a map entry, so a small
// record can decode into gigabytes. Limits.Check counts what the protobuf
// holds before the pprof parser allocates anything, refuses any count over
// its limit, and refuses a profile whose parse would allocate more than
// MaxDecodeHeapBytes (estimated from the counts with measured per-element
// costs), so each dimension can be generous while their sum stays bounded.
//
// The defaults (DefaultLimits) keep real profiles far inside: the largest in
// google/pprof's testdata (a 1.2 MB Go CPU profile, 2.4 MB of protobuf) has
// 20,430 samples, 23,355 locations, 23,038 functions and 499,787 location
// references, and its parse is estimated at 56 MB; a busy 96-core host
// sampled at 100 Hz for 10 s gives at most 96,000 samples of at most
// 127+127 frames (the agent's kernel and user stack depth), which the agent
// splits into records under 900 KB. The zero Limits refuses every profile:
// start from DefaultLimits and change what differs.
type Limits struct {
	// MaxDecompressedBytes bounds the protobuf after gunzip.
	MaxDecompressedBytes int
	// MaxDecodeHeapBytes bounds the heap the pprof parser and its
	// consistency check allocate for one profile, as estimated from the
	// counts (an upper bound: TestLimitsHeapCost measures each cost).
	MaxDecodeHeapBytes int64
	// MaxSampleTypes bounds sample_type entries, and so the values of one
	// sample (a sample must have one value per sample type).
	MaxSampleTypes int
	// MaxSamples bounds sample entries.
	MaxSamples int
	// MaxLocationsPerSample bounds the stack depth of one sample.
	MaxLocationsPerSample int
	// MaxSampleLocations bounds the location references of all samples
	// together (the sum of their stack depths).
	MaxSampleLocations int
	// MaxLabelsPerSample bounds the labels of one sample.
	MaxLabelsPerSample int
	// MaxLabels bounds the labels of all samples together.
	MaxLabels int
	// MaxMappings, MaxLocations and MaxFunctions bound those tables.
	MaxMappings  int
	MaxLocations int
	MaxFunctions int
	// MaxLines bounds the lines of all locations together (one per
	// inlined call plus one).
	MaxLines int
	// MaxStrings bounds string_table entries.
	MaxStrings int
	// MaxStringBytes bounds one string of the string table.
	MaxStringBytes int
	// MaxComments bounds the profile's comments.
	MaxComments int
}

// DefaultLimits are the limits of DecodeProfile. They are documented, with
// the error each gives, in the "Limits" section of schemas/kafka.md.
func DefaultLimits() Limits {
	return Limits{
		MaxDecompressedBytes:  MaxProfileBytes, // 32 MiB
		MaxDecodeHeapBytes:    256 << 20,
		MaxSampleTypes:        16,
		MaxSamples:            1 << 19, // 524,288
		MaxLocationsPerSample: 4096,
		MaxSampleLocations:    1 << 22, // 4,194,304
		MaxLabelsPerSample:    128,
		MaxLabels:             1 << 20, // 1,048,576
		MaxMappings:           1 << 16, // 65,536
		MaxLocations:          1 << 19, // 524,288
		MaxFunctions:          1 << 19, // 524,288
		MaxLines:              1 << 21, // 2,097,152
		MaxStrings:            1 << 20, // 1,048,576
		MaxStringBytes:        1 << 16, // 64 KiB
		MaxComments:           1024,
	}
}

// Upper bounds of the heap the pprof parser (and Profile.CheckValid after
// it) allocates per element, measured with runtime.MemStats on profiles
// holding nothing but that element just past a power of two (the worst
// slice growth; TestLimitsHeapCost), rounded up by a quarter or more. They
// include the growth of the slices the element is appended to, the ID maps
// of the parser and of CheckValid, and the label maps.
const (
	heapPerSample         = 240 // a *Sample, its pointer, its location slice header
	heapPerLabelledSample = 320 // the label map of a sample with labels
	heapPerLabel          = 240
	heapPerValue          = 24
	heapPerSampleLocation = 24
	heapPerMapping        = 300
	heapPerLocation       = 240
	heapPerLine           = 56
	heapPerFunction       = 280
	heapPerString         = 110
	heapPerComment        = 120
	heapPerSampleType     = 120
	// The string table's strings are copied out of the protobuf.
	heapPerByte = 1
	heapFixed   = 16 << 10
)

// heapEstimate is an upper bound of what parsing a protobuf of rawLen bytes
// with counts c allocates.
func heapEstimate(c *counts, rawLen int) int64 {
	n := func(v int) int64 { return int64(v) }
	return heapFixed + heapPerByte*n(rawLen) +
		heapPerSampleType*n(c.sampleTypes) +
		heapPerSample*n(c.samples) + heapPerLabelledSample*n(c.labelledSamples) +
		heapPerLabel*n(c.labels) + heapPerValue*n(c.values) +
		heapPerSampleLocation*n(c.sampleLocations) +
		heapPerMapping*n(c.mappings) + heapPerLocation*n(c.locations) + heapPerLine*n(c.lines) +
		heapPerFunction*n(c.functions) + heapPerString*n(c.strings) + heapPerComment*n(c.comments)
}

// Fields of profile.proto (google/pprof) that the check reads.
const (
	fieldProfileSampleType  = 1
	fieldProfileSample      = 2
	fieldProfileMapping     = 3
	fieldProfileLocation    = 4
	fieldProfileFunction    = 5
	fieldProfileStringTable = 6
	fieldProfilePeriodType  = 11
	fieldProfileComment     = 13

	fieldSampleLocationID = 1
	fieldSampleValue      = 2
	fieldSampleLabel      = 3

	fieldLocationLine = 4
)

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// errWire is wrapped into ErrNotPprof: the pprof parser would refuse the
// same bytes, but the check cannot count what it cannot walk.
var errWire = errors.New("malformed protobuf")

// Check walks the uncompressed pprof protobuf raw and returns an error
// wrapping ErrTooLarge (naming the limit, the value and the limit) when it
// holds more than l allows, ErrInvalidProfile when its samples' value counts
// differ from its sample types, or ErrNotPprof when it is not a protobuf. It
// allocates nothing, so it runs before the pprof parser does.
func (l Limits) Check(raw []byte) error {
	_, err := l.count(raw)
	return err
}

// count is Check, also returning what it counted.
func (l Limits) count(raw []byte) (counts, error) {
	var c counts
	if len(raw) > l.MaxDecompressedBytes {
		return c, tooLarge("decompressed bytes", len(raw), l.MaxDecompressedBytes)
	}
	err := walk(raw, func(field, wire int, data []byte, _ uint64) error {
		if wire != wireBytes {
			// A scalar where pprof expects a message or a string, or a
			// scalar field: no allocation either way (a comment is one
			// unpacked int64, counted below).
			if field == fieldProfileComment && wire == wireVarint {
				c.comments++
				if c.comments > l.MaxComments {
					return tooLarge("comments", c.comments, l.MaxComments)
				}
			}
			return nil
		}
		switch field {
		case fieldProfileSampleType:
			c.sampleTypes++
			if c.sampleTypes > l.MaxSampleTypes {
				return tooLarge("sample types", c.sampleTypes, l.MaxSampleTypes)
			}
		case fieldProfileSample:
			c.samples++
			if c.samples > l.MaxSamples {
				return tooLarge("samples", c.samples, l.MaxSamples)
			}
			return l.checkSample(&c, data)
		case fieldProfileMapping:
			c.mappings++
			if c.mappings > l.MaxMappings {
				return tooLarge("mappings", c.mappings, l.MaxMappings)
			}
		case fieldProfileLocation:
			c.locations++
			if c.locations > l.MaxLocations {
				return tooLarge("locations", c.locations, l.MaxLocations)
			}
			return l.checkLocation(&c, data)
		case fieldProfileFunction:
			c.functions++
			if c.functions > l.MaxFunctions {
				return tooLarge("functions", c.functions, l.MaxFunctions)
			}
		case fieldProfileStringTable:
			c.strings++
			if c.strings > l.MaxStrings {
				return tooLarge("strings", c.strings, l.MaxStrings)
			}
			if len(data) > l.MaxStringBytes {
				return tooLarge(fmt.Sprintf("bytes of string %d", c.strings-1), len(data), l.MaxStringBytes)
			}
		case fieldProfilePeriodType:
			// Each occurrence allocates a value type that replaces the
			// last: one is all a profile has.
			c.periodTypes++
			if c.periodTypes > 1 {
				return fmt.Errorf("%w: period_type given %d times", ErrInvalidProfile, c.periodTypes)
			}
		case fieldProfileComment:
			c.comments += packedCount(data)
			if c.comments > l.MaxComments {
				return tooLarge("comments", c.comments, l.MaxComments)
			}
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	if est := heapEstimate(&c, len(raw)); est > l.MaxDecodeHeapBytes {
		return c, fmt.Errorf("%w: estimated decode heap: %d bytes, limit %d (%d samples, %d labels, %d location references, %d locations, %d functions, %d strings)",
			ErrTooLarge, est, l.MaxDecodeHeapBytes, c.samples, c.labels, c.sampleLocations, c.locations, c.functions, c.strings)
	}
	switch {
	case c.samples == 0:
	case c.firstValues != c.sampleTypes:
		return c, valueMismatch(0, c.firstValues, c.sampleTypes)
	case c.oddSample > 0:
		return c, valueMismatch(c.oddSample, c.oddValues, c.sampleTypes)
	}
	return c, nil
}

// counts is what Check has seen so far.
type counts struct {
	sampleTypes, samples, mappings, locations, functions, strings int
	periodTypes, comments                                         int
	sampleLocations, labels, lines, values, labelledSamples       int
	// The value count of the first sample, and the first sample whose
	// count differs from it: CheckValid's "mismatch", found without
	// building the samples.
	firstValues          int
	oddSample, oddValues int
}

func (l Limits) checkSample(c *counts, msg []byte) error {
	var locs, values, labels int
	err := walk(msg, func(field, wire int, data []byte, _ uint64) error {
		n := 1
		if wire == wireBytes && field != fieldSampleLabel {
			n = packedCount(data)
		}
		switch field {
		case fieldSampleLocationID:
			locs += n
			c.sampleLocations += n
		case fieldSampleValue:
			values += n
			c.values += n
		case fieldSampleLabel:
			labels++
			c.labels++
		}
		return nil
	})
	if err != nil {
		return err
	}
	i := c.samples - 1
	if labels > 0 {
		c.labelledSamples++
	}
	switch {
	case locs > l.MaxLocationsPerSample:
		return tooLarge(fmt.Sprintf("locations of sample %d", i), locs, l.MaxLocationsPerSample)
	case c.sampleLocations > l.MaxSampleLocations:
		return tooLarge("location references of all samples", c.sampleLocations, l.MaxSampleLocations)
	case values > l.MaxSampleTypes:
		return tooLarge(fmt.Sprintf("values of sample %d", i), values, l.MaxSampleTypes)
	case labels > l.MaxLabelsPerSample:
		return tooLarge(fmt.Sprintf("labels of sample %d", i), labels, l.MaxLabelsPerSample)
	case c.labels > l.MaxLabels:
		return tooLarge("labels of all samples", c.labels, l.MaxLabels)
	}
	if i == 0 {
		c.firstValues = values
	} else if values != c.firstValues && c.oddSample == 0 {
		c.oddSample, c.oddValues = i, values
	}
	return nil
}

func (l Limits) checkLocation(c *counts, msg []byte) error {
	return walk(msg, func(field, wire int, _ []byte, _ uint64) error {
		if field == fieldLocationLine && wire == wireBytes {
			c.lines++
			if c.lines > l.MaxLines {
				return tooLarge("lines of all locations", c.lines, l.MaxLines)
			}
		}
		return nil
	})
}

func valueMismatch(sample, values, types int) error {
	return fmt.Errorf("%w: sample %d has %d values, the profile declares %d sample types", ErrInvalidProfile, sample, values, types)
}

func tooLarge(what string, n, limit int) error {
	return fmt.Errorf("%w: %s: %d, limit %d", ErrTooLarge, what, n, limit)
}

// walk calls fn for each field of the protobuf message msg: its number, wire
// type, the bytes of a length-delimited field and the value of a varint.
func walk(msg []byte, fn func(field, wire int, data []byte, v uint64) error) error {
	for len(msg) > 0 {
		key, n := uvarint(msg)
		if n <= 0 {
			return fmt.Errorf("%w: %v: bad field key", ErrNotPprof, errWire)
		}
		msg = msg[n:]
		field, wire := int(key>>3), int(key&7)
		var data []byte
		var v uint64
		switch wire {
		case wireVarint:
			if v, n = uvarint(msg); n <= 0 {
				return fmt.Errorf("%w: %v: bad varint in field %d", ErrNotPprof, errWire, field)
			}
			msg = msg[n:]
		case wireFixed64:
			if len(msg) < 8 {
				return fmt.Errorf("%w: %v: short fixed64 in field %d", ErrNotPprof, errWire, field)
			}
			msg = msg[8:]
		case wireFixed32:
			if len(msg) < 4 {
				return fmt.Errorf("%w: %v: short fixed32 in field %d", ErrNotPprof, errWire, field)
			}
			msg = msg[4:]
		case wireBytes:
			size, n := uvarint(msg)
			if n <= 0 || size > uint64(len(msg)-n) {
				return fmt.Errorf("%w: %v: bad length in field %d", ErrNotPprof, errWire, field)
			}
			data = msg[n : n+int(size)]
			msg = msg[n+int(size):]
		default:
			return fmt.Errorf("%w: %v: wire type %d in field %d", ErrNotPprof, errWire, wire, field)
		}
		if err := fn(field, wire, data, v); err != nil {
			return err
		}
	}
	return nil
}

// uvarint decodes a protobuf varint as pprof does (at most 10 bytes); n is
// 0 when b ends inside it or it is longer.
func uvarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// packedCount is the number of varints in a packed repeated field: each
// ends with a byte below 0x80. A trailing unfinished varint counts too, as
// the pprof parser sizes its slice the same way before failing on it.
func packedCount(b []byte) int {
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	if len(b) > 0 && b[len(b)-1] >= 0x80 {
		n++
	}
	return n
}
