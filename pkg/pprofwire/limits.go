package pprofwire

import "github.com/stackstream/stackstream/schemas/record"

// maxHeapPerWireByte bounds the decode heap record.Limits estimates per
// protobuf byte of any element (the costliest, a sample with one label,
// is about 200 bytes of heap per byte; TestCheckAbove).
const maxHeapPerWireByte = 256

// CheckAbove is the protobuf size from which a decoder that reads a
// profile's wire form must run l.Check before reading it. A limit on a
// count of the whole profile (samples, labels, location references,
// locations, functions, lines, strings) or on the decode heap cannot be
// passed by a shorter protobuf, since each element takes at least one or
// two bytes on the wire and at most maxHeapPerWireByte of heap: such a
// protobuf is within l if it is within the limits on one element (sample
// types, mappings, comments, one period type, a sample's locations and
// labels, a string's bytes), which the decoder checks as it reads. l.Check
// walks the whole protobuf, about a third of the work of reading it.
func CheckAbove(l record.Limits) int {
	return min(2*l.MaxSamples, 2*l.MaxLabels, l.MaxSampleLocations, 2*l.MaxLocations,
		2*l.MaxFunctions, 2*l.MaxLines, 2*l.MaxStrings, int(l.MaxDecodeHeapBytes/maxHeapPerWireByte))
}
