package pproftest

import (
	"bytes"
	"compress/gzip"
)

// Gzip compresses b: record values that are gzip but not (valid) pprof.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
