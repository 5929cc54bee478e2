package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	profiles *prometheus.CounterVec
	records  *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	empty    prometheus.Counter
}

// rejectReasons are the values of the reason label, created up front so a
// dashboard sees zeros before the first refusal.
var rejectReasons = []string{
	"auth", "body_too_large", "decoded_too_large", "busy", "buffer_full", "kafka", "kafka_timeout",
	"read_body", "bad_name", "bad_time", "bad_sample_rate", "bad_format", "bad_form", "bad_push",
	"bad_gzip", "bad_profile", "bad_tag", "unsupported_type", "time_out_of_range",
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_requests_total", Help: "Push requests answered, by endpoint (ingest, push) and HTTP status.",
		}, []string{"endpoint", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_rejected_requests_total", Help: "Push requests refused, by reason (docs/INGEST.md).",
		}, []string{"reason"}),
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_profiles_total", Help: "Profiles decoded, by format (pprof, folded, multipart, push).",
		}, []string{"format"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_records_total", Help: "Records acknowledged by Kafka on profiles.raw, by profile type.",
		}, []string{"type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_record_bytes_total", Help: "Value bytes acknowledged by Kafka on profiles.raw, by profile type.",
		}, []string{"type"}),
		empty: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_ingest_empty_profiles_total", Help: "Profiles without samples, accepted and not stored.",
		}),
	}
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	reg.MustRegister(m.requests, m.rejected, m.profiles, m.records, m.bytes, m.empty)
	return m
}
