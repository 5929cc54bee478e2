package record

import "strconv"

// HeaderPart names which part of a split profile a record carries. The agent
// splits an interval too large for one record into parts with the same
// time_nanos, and the symbolizer splits an output too large for one record;
// without this header the parts of one process would get the same samples
// document ID downstream and the later would overwrite the earlier. Absent
// (or empty) on records that were not split. The value is opaque: compare it,
// do not parse it.
const HeaderPart = "stackstream-part"

// SubPart names part i (0-based) of a record whose own part was parent ("" when
// it was not split): "3", or "2.3" when part 2 is split again.
func SubPart(parent string, i int) string {
	if parent == "" {
		return strconv.Itoa(i)
	}
	return parent + "." + strconv.Itoa(i)
}
