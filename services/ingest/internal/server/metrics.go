package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	profiles *prometheus.CounterVec
	records  *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	empty    prometheus.Counter
	// otlpRejected counts OTLP profiles not stored, by reason.
	otlpRejected *prometheus.CounterVec
}

// rejectReasons are the values of the reason label, created up front so a
// dashboard sees zeros before the first refusal.
var rejectReasons = []string{
	"auth", "body_too_large", "decoded_too_large", "busy", "buffer_full", "kafka", "kafka_timeout",
	"read_body", "bad_name", "bad_time", "bad_sample_rate", "bad_format", "bad_form", "bad_push",
	"bad_gzip", "bad_profile", "bad_tag", "unsupported_type", "time_out_of_range", "bad_otlp",
}

// otlpRejectReasons are the reasons an OTLP profile is not stored while
// others of its request are (the response's partial success).
var otlpRejectReasons = []string{"unsupported_type", "time_out_of_range", "decoded_too_large", "bad_profile"}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_requests_total", Help: "Push requests answered, by endpoint (ingest, push, otlp_http, otlp_grpc) and HTTP status (gRPC: the status it stands for).",
		}, []string{"endpoint", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_rejected_requests_total", Help: "Push requests refused, by reason (docs/INGEST.md).",
		}, []string{"reason"}),
		profiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_profiles_total", Help: "Profiles decoded, by format (pprof, folded, multipart, push, otlp).",
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
		otlpRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_ingest_otlp_rejected_profiles_total", Help: "OTLP profiles not stored, by reason, counted in the partial success of their request (or its 400).",
		}, []string{"reason"}),
	}
	for _, r := range otlpRejectReasons {
		m.otlpRejected.WithLabelValues(r)
	}
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	reg.MustRegister(m.requests, m.rejected, m.profiles, m.records, m.bytes, m.empty, m.otlpRejected)
	return m
}
