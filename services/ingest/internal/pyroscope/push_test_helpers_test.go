package pyroscope

import "google.golang.org/protobuf/encoding/protowire"

// pushRequest encodes a PushRequest of one series.
func pushRequest(labels []Tag, profiles ...[]byte) []byte {
	var series []byte
	for _, l := range labels {
		var lp []byte
		lp = protowire.AppendTag(lp, fieldLabelName, protowire.BytesType)
		lp = protowire.AppendString(lp, l.Key)
		lp = protowire.AppendTag(lp, fieldLabelValue, protowire.BytesType)
		lp = protowire.AppendString(lp, l.Value)
		series = protowire.AppendTag(series, fieldSeriesLabels, protowire.BytesType)
		series = protowire.AppendBytes(series, lp)
	}
	for _, p := range profiles {
		var s []byte
		s = protowire.AppendTag(s, fieldSampleProfile, protowire.BytesType)
		s = protowire.AppendBytes(s, p)
		s = protowire.AppendTag(s, 2, protowire.BytesType)
		s = protowire.AppendString(s, "id-1")
		series = protowire.AppendTag(series, fieldSeriesSamples, protowire.BytesType)
		series = protowire.AppendBytes(series, s)
	}
	var req []byte
	req = protowire.AppendTag(req, fieldPushSeries, protowire.BytesType)
	return protowire.AppendBytes(req, series)
}
