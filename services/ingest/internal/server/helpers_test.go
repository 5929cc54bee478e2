package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stackstream/stackstream/pkg/telemetry"
)

func prometheusRegistry() *prometheus.Registry { return telemetry.NewRegistry() }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func httptestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// pushRequest encodes a PushRequest (push/v1) of one series with one profile.
func pushRequest(labels map[string]string, raw []byte) []byte {
	var series []byte
	for k, v := range labels {
		var lp []byte
		lp = protowire.AppendTag(lp, 1, protowire.BytesType)
		lp = protowire.AppendString(lp, k)
		lp = protowire.AppendTag(lp, 2, protowire.BytesType)
		lp = protowire.AppendString(lp, v)
		series = protowire.AppendTag(series, 1, protowire.BytesType)
		series = protowire.AppendBytes(series, lp)
	}
	var s []byte
	s = protowire.AppendTag(s, 1, protowire.BytesType)
	s = protowire.AppendBytes(s, raw)
	series = protowire.AppendTag(series, 2, protowire.BytesType)
	series = protowire.AppendBytes(series, s)
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	return protowire.AppendBytes(req, series)
}
