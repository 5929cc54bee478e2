package aggregate

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the document's JSON, byte for byte what
// json.Marshal(&d.Doc) writes (field order, omitempty, escaping, the
// time's RFC 3339 form), without reflection: encoding was a tenth of the
// rollup's CPU per profile at fleet load (BenchmarkFleet).
// TestAppendJSONMatchesMarshal and FuzzAppendJSON hold it to that.
func (d *Pending) AppendJSON(b []byte) ([]byte, error) {
	doc := &d.Doc
	b = append(b, `{"@timestamp":`...)
	if y := doc.Timestamp.Year(); y < 0 || y > 9999 {
		// json.Marshal refuses these; Add never makes them (record.CheckTime).
		raw, err := json.Marshal(doc.Timestamp)
		if err != nil {
			return b, err
		}
		b = append(b, raw...)
	} else {
		b = append(b, '"')
		b = doc.Timestamp.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = appendField(b, "resolution", doc.Resolution, false)
	b = appendField(b, "kind", doc.Kind, false)
	b = appendField(b, "type", doc.Type, false)
	b = appendField(b, "service", doc.Service, false)
	b = appendField(b, "host", doc.Host, true)
	b = appendField(b, "function", doc.Function, true)
	if len(doc.StackIDs) > 0 {
		b = append(b, `,"stack_id":[`...)
		for i, id := range doc.StackIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, ']')
	}
	if len(doc.StackValues) > 0 {
		b = append(b, `,"stack_values":"`...)
		b = base64.StdEncoding.AppendEncode(b, doc.StackValues)
		b = append(b, '"')
	}
	b = appendInt(b, "value", doc.Value)
	b = appendInt(b, "self", doc.Self)
	b = appendInt(b, "total", doc.Total)
	b = appendInt(b, "samples", doc.Samples)
	var err error
	if b, err = appendFloat(b, "cores", doc.Cores); err != nil {
		return b, err
	}
	if b, err = appendFloat(b, "mem_avg", doc.MemAvg); err != nil {
		return b, err
	}
	b = appendInt(b, "mem_max", doc.MemMax)
	b = appendInt(b, "stack_value", doc.StackValue)
	b = appendInt(b, "partition", int64(doc.Partition))
	if len(doc.Tree) > 0 {
		b = append(b, `,"tree":"`...)
		b = base64.StdEncoding.AppendEncode(b, doc.Tree)
		b = append(b, '"')
	}
	b = appendField(b, "sources", doc.Sources, true)
	b = appendField(b, "digest", doc.Digest, true)
	return append(b, '}'), nil
}

func appendField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

// appendString writes plain strings (printable ASCII that encoding/json
// does not escape: the usual names, hosts and IDs) as they are, and leaves
// every other string to encoding/json so the escaping stays its own.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(s)
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendInt(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendFloat leaves the number's form to encoding/json (one or two per
// service document), and its error for NaN and infinities.
func appendFloat(b []byte, name string, v float64) ([]byte, error) {
	if v == 0 {
		return b, nil
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	raw, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, raw...), nil
}
