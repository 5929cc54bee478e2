package debuginfo

import (
	"bytes"
	"compress/gzip"
)

func mustGzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
