// Package server is stackstream-ingest's HTTP side: Pyroscope's /ingest
// (pprof, folded, the Go SDK's multipart form) and push API, with
// authentication, body and decode limits, a bound on concurrent decodes,
// and back-pressure from the Kafka producer's bounded buffer (429 with
// Retry-After).
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/semaphore"

	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/otlp"
	"github.com/stackstream/stackstream/services/ingest/internal/pyroscope"
)

// Producer is what the server needs of a *kgo.Client.
type Producer interface {
	TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Options configure the server.
type Options struct {
	Topic   string // profiles.raw with its prefix
	Convert convert.Options
	Auth    *Auth
	// MaxBodyBytes bounds a request body as sent.
	MaxBodyBytes int64
	// MaxConcurrent requests decode at once; others wait up to QueueWait.
	MaxConcurrent int
	// MaxReadBytes bounds the bodies being received at once (each counted
	// at its Content-Length, or MaxBodyBytes when it has none): slow
	// senders hold only this budget, never a decode slot. 0 means
	// 16 x MaxBodyBytes.
	MaxReadBytes int64
	QueueWait    time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgements.
	ProduceTimeout time.Duration
	// TrustForwardedFor takes the client address from X-Forwarded-For.
	TrustForwardedFor bool
	Ready             telemetry.ReadyFunc
	// OTLP bounds an OTLP profiles request; zero means otlp.DefaultLimits.
	OTLP otlp.Limits
}

// errBadRequest is wrapped by errors about the request itself.
var errBadRequest = errors.New("bad request")

// Server handles pushes.
type Server struct {
	p     Producer
	opts  Options
	log   *slog.Logger
	m     *metrics
	slots chan struct{}
	// reading is the byte budget of bodies being received.
	reading *semaphore.Weighted
	// waiting bounds the requests queued for a slot, so a flood is
	// refused at once instead of piling up goroutines.
	waiting atomic.Int64
	mux     *http.ServeMux
}

// New returns the handler of every HTTP endpoint: POST /ingest, POST
// /push.v1.PusherService/Push, POST /v1development/profiles, GET
// /metrics, /healthz, /readyz.
func New(p Producer, opts Options, reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return NewServer(p, opts, reg, log).Handler()
}

// NewServer returns the server, whose Handler serves HTTP and whose GRPC
// serves OTLP over gRPC; both share the decode slots and the producer.
func NewServer(p Producer, opts Options, reg *prometheus.Registry, log *slog.Logger) *Server {
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = 16 * opts.MaxBodyBytes
	}
	if opts.OTLP == (otlp.Limits{}) {
		opts.OTLP = otlp.DefaultLimits()
	}
	s := &Server{p: p, opts: opts, log: log, m: newMetrics(reg), slots: make(chan struct{}, max(1, opts.MaxConcurrent)),
		reading: semaphore.NewWeighted(max(opts.MaxReadBytes, opts.MaxBodyBytes))}
	s.mux = telemetry.Mux(reg, opts.Ready)
	s.mux.Handle("POST /ingest", s.wrap(endpointIngest, s.ingest))
	s.mux.Handle("POST "+pyroscope.PushPath, s.wrap(endpointPush, s.push))
	s.mux.Handle("POST "+OTLPPath, http.HandlerFunc(s.otlpHTTP))
	return s
}

// Handler serves every HTTP endpoint.
func (s *Server) Handler() http.Handler { return s.mux }

const (
	endpointIngest   = "ingest"
	endpointPush     = "push"
	endpointOTLPHTTP = "otlp_http"
	endpointOTLPGRPC = "otlp_grpc"
)

// failure is a refused request: the status, the rejects reason, and a
// message that says what was wrong.
type failure struct {
	status int
	reason string
	msg    string
	retry  time.Duration
}

func (f *failure) Error() string { return f.msg }

func fail(status int, reason, format string, args ...any) *failure {
	return &failure{status: status, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// wrap authenticates, bounds the body and the decodes in flight, and
// answers the failure a handler returns.
func (s *Server) wrap(endpoint string, h func(*http.Request, []byte, string) *failure) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := s.serve(r, h)
		if f == nil {
			s.m.requests.WithLabelValues(endpoint, "200").Inc()
			if endpoint == endpointPush {
				// An empty PushResponse.
				w.Header().Set("Content-Type", "application/proto")
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		s.m.requests.WithLabelValues(endpoint, strconv.Itoa(f.status)).Inc()
		s.m.rejected.WithLabelValues(f.reason).Inc()
		if f.status >= 500 {
			s.log.Warn("push not stored", "reason", f.reason, "err", f.msg)
		} else {
			s.log.Debug("push refused", "status", f.status, "reason", f.reason, "err", f.msg, "client", r.RemoteAddr)
		}
		if f.retry > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(f.retry.Round(time.Second)/time.Second))))
		}
		if f.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stackstream-ingest"`)
		}
		if endpoint == endpointPush {
			// The Connect protocol's error body.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.status)
			json.NewEncoder(w).Encode(map[string]string{"code": connectCode(f.status), "message": f.msg})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(f.status)
		io.WriteString(w, f.msg+"\n")
	})
}

func connectCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge:
		return "resource_exhausted"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusUnsupportedMediaType:
		return "unimplemented"
	}
	return "invalid_argument"
}

func (s *Server) serve(r *http.Request, h func(*http.Request, []byte, string) *failure) *failure {
	tenant, ok := s.opts.Auth.Check(r)
	if !ok {
		return fail(http.StatusUnauthorized, "auth", "authentication required: send a token of STACKSTREAM_INGEST_TOKENS as a Bearer token or basic auth password, or the basic auth credentials")
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		return fail(http.StatusRequestEntityTooLarge, "body_too_large", "body of %d bytes is larger than %d (STACKSTREAM_INGEST_MAX_BODY_BYTES)", r.ContentLength, s.opts.MaxBodyBytes)
	}
	body, f := s.readBody(r)
	if f != nil {
		return f
	}
	if !s.acquire(r.Context()) {
		return &failure{status: http.StatusTooManyRequests, reason: "busy", retry: s.opts.QueueWait,
			msg: fmt.Sprintf("busy: %d pushes are being decoded (STACKSTREAM_INGEST_MAX_CONCURRENT) and none finished within %s: retry later", cap(s.slots), s.opts.QueueWait)}
	}
	defer func() { <-s.slots }()
	var err error
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		if body, err = convert.Gunzip(body, s.opts.Convert.Limits.MaxDecompressedBytes); err != nil {
			return s.decodeFailure("body", err)
		}
	}
	return h(r, body, tenant)
}

// readBody receives the body within the read budget: its Content-Length
// (or the body limit, for a body without one) is reserved first, waiting
// up to the queue wait.
func (s *Server) readBody(r *http.Request) ([]byte, *failure) {
	want := s.opts.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < want {
		want = r.ContentLength
	}
	want = max(want, 1)
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.QueueWait)
	err := s.reading.Acquire(ctx, want)
	cancel()
	if err != nil {
		return nil, &failure{status: http.StatusTooManyRequests, reason: "busy", retry: s.opts.QueueWait,
			msg: fmt.Sprintf("busy: %d bytes of bodies are being received (STACKSTREAM_INGEST_MAX_READ_BYTES) and not enough finished within %s: retry later", s.opts.MaxReadBytes, s.opts.QueueWait)}
	}
	defer s.reading.Release(want)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(want) + bytes.MinRead)
	}
	// A body longer than its Content-Length is cut by net/http; one
	// without it is read up to the limit, one byte over tells it is larger.
	_, err = buf.ReadFrom(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	if err != nil {
		return nil, fail(http.StatusBadRequest, "read_body", "read body: %v", err)
	}
	if int64(buf.Len()) > s.opts.MaxBodyBytes {
		return nil, fail(http.StatusRequestEntityTooLarge, "body_too_large", "body is larger than %d bytes (STACKSTREAM_INGEST_MAX_BODY_BYTES)", s.opts.MaxBodyBytes)
	}
	return buf.Bytes(), nil
}

func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	if s.waiting.Add(1) > int64(4*cap(s.slots)) {
		s.waiting.Add(-1)
		return false
	}
	defer s.waiting.Add(-1)
	t := time.NewTimer(s.opts.QueueWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// ingest serves Pyroscope's POST /ingest.
func (s *Server) ingest(r *http.Request, body []byte, tenant string) *failure {
	q := r.URL.Query()
	name, err := pyroscope.ParseName(q.Get("name"))
	if err != nil {
		return fail(http.StatusBadRequest, "bad_name", "name: %v", err)
	}
	from, err := pyroscope.ParseTime(q.Get("from"))
	if err != nil {
		return fail(http.StatusBadRequest, "bad_time", "from: %v", err)
	}
	until, err := pyroscope.ParseTime(q.Get("until"))
	if err != nil {
		return fail(http.StatusBadRequest, "bad_time", "until: %v", err)
	}
	var rate int64
	if v := q.Get("sampleRate"); v != "" {
		if rate, err = strconv.ParseInt(v, 10, 64); err != nil || rate < 0 || rate > 1e9 {
			return fail(http.StatusBadRequest, "bad_sample_rate", "sampleRate=%q is not a number of samples per second from 0 to 1e9", short(v))
		}
	}
	spy := q.Get("spyName")
	push := convert.Push{Service: name.App, Tags: name.Tags, Tenant: tenant, Hint: name.Suffix,
		SpyName: spy, SampleRate: rate, From: from, Until: until}

	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	format := q.Get("format")
	switch {
	case format == "jfr":
		return s.ingestJFR(push, body, mediaType, params["boundary"], r, spy)
	case mediaType == "multipart/form-data":
		f, err := readForm(body, params["boundary"], "profile")
		if err != nil {
			return fail(http.StatusBadRequest, "bad_form", "%v", err)
		}
		s.m.profiles.WithLabelValues("multipart").Inc()
		if f.prevProfile == nil {
			return s.store(push, f.profile, r, spy)
		}
		if push.Profile, err = convert.DecodePprof(f.profile, s.opts.Convert.Limits); err != nil {
			return s.decodeFailure("profile", err)
		}
		prev, err := convert.DecodePprof(f.prevProfile, s.opts.Convert.Limits)
		if err != nil {
			return s.decodeFailure("prev_profile", err)
		}
		if push.Profile, err = subtractPrev(push.Profile, prev, f.sampleTypes); err != nil {
			return fail(http.StatusBadRequest, "bad_profile", "%v", err)
		}
		return s.store(push, nil, r, spy)
	case format == "pprof":
		s.m.profiles.WithLabelValues(format).Inc()
		return s.store(push, body, r, spy)
	case format == "folded" || format == "" || format == "lines":
		spec, err := convert.FoldedSpec(name.Suffix, q.Get("units"), q.Get("aggregationType"), rate)
		if err != nil {
			return fail(http.StatusBadRequest, "unsupported_type", "%v", err)
		}
		if push.Profile, err = pyroscope.ParseFolded(body, spec, s.foldedLimits()); err != nil {
			return s.decodeFailure("folded body", err)
		}
		s.m.profiles.WithLabelValues("folded").Inc()
		return s.store(push, nil, r, spy)
	default:
		return fail(http.StatusBadRequest, "bad_format", "format=%q is not supported: use pprof, folded or jfr (or the Go SDK's multipart form)", short(format))
	}
}

func (s *Server) foldedLimits() pyroscope.FoldedLimits {
	l := pyroscope.DefaultFoldedLimits()
	c := s.opts.Convert.Limits
	l.MaxSamples, l.MaxDepth, l.MaxFunctions = c.MaxSamples, c.MaxLocationsPerSample, c.MaxFunctions
	return l
}

// push serves the push API (Connect unary, protobuf).
func (s *Server) push(r *http.Request, body []byte, tenant string) *failure {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/proto" {
		return fail(http.StatusUnsupportedMediaType, "bad_format", "Content-Type %q is not supported: send application/proto", short(ct))
	}
	series, err := pyroscope.DecodePush(body, pyroscope.DefaultPushLimits)
	if err != nil {
		return fail(http.StatusBadRequest, "bad_push", "%v", err)
	}
	// pyroscope-rs says which spy it is in its User-Agent:
	// pyroscope-rs/<spy>/<version> reqwest.
	spy := ""
	if ua := strings.Split(r.Header.Get("User-Agent"), "/"); len(ua) >= 2 && ua[0] == "pyroscope-rs" {
		spy = ua[1]
	}
	for _, ser := range series {
		push := convert.Push{Tenant: tenant, SpyName: spy}
		for _, l := range ser.Labels {
			switch l.Key {
			case "service_name":
				push.Service = l.Value
			case "__name__":
				push.Hint = l.Value
			default:
				push.Tags = append(push.Tags, l)
			}
		}
		if push.Service == "" {
			return fail(http.StatusBadRequest, "bad_name", "push series has no service_name label")
		}
		for _, raw := range ser.Profiles {
			s.m.profiles.WithLabelValues("push").Inc()
			if f := s.store(push, raw, r, spy); f != nil {
				return f
			}
		}
	}
	return nil
}

func (s *Server) decodeFailure(what string, err error) *failure {
	switch {
	case errors.Is(err, record.ErrTooLarge):
		return fail(http.StatusRequestEntityTooLarge, "decoded_too_large", "%s: %v (record limits, schemas/kafka.md)", what, err)
	case errors.Is(err, record.ErrNotGzip):
		return fail(http.StatusBadRequest, "bad_gzip", "%s: %v", what, err)
	}
	return fail(http.StatusBadRequest, "bad_profile", "%s: %v", what, err)
}

// store converts a push into records and produces them: the pprof body
// pprof when it is not nil, else the parsed push.Profile.
func (s *Server) store(push convert.Push, pprof []byte, r *http.Request, spy string) *failure {
	_, host, err := convert.Tags(push.Tags)
	if err != nil {
		return fail(http.StatusBadRequest, "bad_tag", "%v", err)
	}
	if host == "" {
		host = s.clientAddr(r)
	}
	push.Host = record.TruncateUTF8(host, record.MaxHostBytes)
	var recs []convert.Record
	if pprof != nil {
		recs, err = convert.Pprof(pprof, push, s.opts.Convert)
	} else if len(push.Profile.Sample) > 0 {
		recs, err = convert.Records(push, s.opts.Convert)
	}
	switch {
	case errors.Is(err, convert.ErrUnsupported):
		return fail(http.StatusBadRequest, "unsupported_type", "%v", err)
	case errors.Is(err, convert.ErrInvalidTag):
		return fail(http.StatusBadRequest, "bad_tag", "%v", err)
	case errors.Is(err, record.ErrTimeOutOfRange):
		return fail(http.StatusBadRequest, "time_out_of_range", "%v (STACKSTREAM_INGEST_MAX_AGE, STACKSTREAM_INGEST_MAX_CLOCK_SKEW)", err)
	case err != nil:
		return s.decodeFailure("profile", err)
	case len(recs) == 0:
		s.m.empty.Inc()
		return nil // an idle process: nothing to store
	}
	agent := "pyroscope"
	if spy != "" {
		agent += "/" + record.TruncateUTF8(spy, 64)
	}
	out := make([]keyedRecord, len(recs))
	for i, rc := range recs {
		out[i] = keyedRecord{Record: rc, host: push.Host, agent: agent}
	}
	return s.produce(out)
}

// keyedRecord is a record with its key (the host) and agent header.
type keyedRecord struct {
	convert.Record
	host, agent string
}

// produce hands the records to the producer and waits for Kafka's answer.
// A full buffer (Kafka slower than the pushes) is a 429: nothing of it was
// stored, retry later. A failed or unanswered record is a 503.
func (s *Server) produce(recs []keyedRecord) *failure {
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i, rc := range recs {
		kr := &kgo.Record{
			Topic: s.opts.Topic, Key: []byte(rc.host), Value: rc.Value,
			Headers: record.Meta{Type: rc.Type, Host: rc.host, AgentVersion: rc.agent}.Headers(),
		}
		if rc.Part != "" {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(rc.Part)})
		}
		wg.Add(1)
		// Not tied to the request: a client that hangs up does not take back
		// what it handed over.
		s.p.TryProduce(context.Background(), kr, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(s.opts.ProduceTimeout + 5*time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return &failure{status: http.StatusServiceUnavailable, reason: "kafka_timeout", retry: s.opts.ProduceTimeout,
			msg: fmt.Sprintf("Kafka did not acknowledge within %s: retry later", s.opts.ProduceTimeout)}
	}
	for i, err := range errs {
		switch {
		case err == nil:
			s.m.records.WithLabelValues(string(recs[i].Type)).Inc()
			s.m.bytes.WithLabelValues(string(recs[i].Type)).Add(float64(len(recs[i].Value)))
		case errors.Is(err, kgo.ErrMaxBuffered):
			return &failure{status: http.StatusTooManyRequests, reason: "buffer_full", retry: 5 * time.Second,
				msg: "the buffer of records waiting for Kafka is full (STACKSTREAM_INGEST_BUFFER_BYTES, _BUFFER_RECORDS): retry later"}
		default:
			return &failure{status: http.StatusServiceUnavailable, reason: "kafka", retry: 5 * time.Second,
				msg: fmt.Sprintf("produce to %s: %v: retry later", s.opts.Topic, err)}
		}
	}
	return nil
}

// clientAddr is the host of the request's peer, or of the first
// X-Forwarded-For entry when trusted.
func (s *Server) clientAddr(r *http.Request) string {
	if s.opts.TrustForwardedFor {
		if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
			first, _, _ := strings.Cut(xff, ",")
			if ip := net.ParseIP(strings.TrimSpace(first)); ip != nil {
				return ip.String()
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
