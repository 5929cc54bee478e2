package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // OTLP exporters compress with gzip by default
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/otlp"
)

// OTLPPath is the OTLP/HTTP path of profiles (the collector's otlphttp
// exporter appends it to its endpoint).
const OTLPPath = "/v1development/profiles"

// maxOTLPJSONBytes bounds a JSON body after gunzip: JSON is not counted
// by otlp.Check before pdata decodes it, and its smallest sample ("{},")
// is 3 bytes: 1 MiB of them decodes into 43 MB (measured), so 4 MiB stays
// under the 256 MiB a protobuf request may take (otlp.DefaultLimits).
const maxOTLPJSONBytes = 4 << 20

const (
	contentProto = "application/x-protobuf"
	contentJSON  = "application/json"
)

// otlpHTTP serves POST /v1development/profiles: an
// ExportProfilesServiceRequest as protobuf or JSON, answered in kind.
func (s *Server) otlpHTTP(w http.ResponseWriter, r *http.Request) {
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := mediaType == contentJSON
	var resp pprofileotlp.ExportResponse
	f := func() *failure {
		if !isJSON && mediaType != contentProto && mediaType != "application/protobuf" {
			return fail(http.StatusUnsupportedMediaType, "bad_format", "Content-Type %q is not supported: send %s or %s", short(mediaType), contentProto, contentJSON)
		}
		return s.serve(r, func(r *http.Request, body []byte, tenant string) *failure {
			if err := pprofileotlp.ValidateDevelopmentVersion(r.Header.Values(pprofileotlp.DevelopmentVersionHeader)); err != nil {
				return fail(http.StatusBadRequest, "bad_otlp", "%v", err)
			}
			var f *failure
			resp, f = s.exportOTLP(body, isJSON, tenant, s.clientAddr(r))
			return f
		})
	}()
	ct := contentProto
	if isJSON {
		ct = contentJSON
	}
	w.Header().Set("Content-Type", ct)
	if f == nil {
		s.m.requests.WithLabelValues(endpointOTLPHTTP, "200").Inc()
		var b []byte
		if isJSON {
			b, _ = resp.MarshalJSON()
		} else {
			b, _ = resp.MarshalProto()
		}
		w.WriteHeader(http.StatusOK)
		w.Write(b)
		return
	}
	s.refused(endpointOTLPHTTP, f, r.RemoteAddr)
	if f.retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(f.retry)))
	}
	if f.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="stackstream-ingest"`)
	}
	w.WriteHeader(f.status)
	// The body of an OTLP/HTTP error is a google.rpc.Status.
	code := grpcCode(f.status)
	if isJSON {
		json.NewEncoder(w).Encode(map[string]any{"code": int(code), "message": f.msg})
		return
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, f.msg)
	w.Write(b)
}

func retrySeconds(d time.Duration) int { return max(1, int(d.Round(time.Second)/time.Second)) }

// refused counts and logs a refused request.
func (s *Server) refused(endpoint string, f *failure, client string) {
	s.m.requests.WithLabelValues(endpoint, strconv.Itoa(f.status)).Inc()
	s.m.rejected.WithLabelValues(f.reason).Inc()
	if f.status >= 500 {
		s.log.Warn("push not stored", "endpoint", endpoint, "reason", f.reason, "err", f.msg)
	} else {
		s.log.Debug("push refused", "endpoint", endpoint, "status", f.status, "reason", f.reason, "err", f.msg, "client", client)
	}
}

// grpcCode is the gRPC status of an HTTP status, as OTLP pairs them: only
// Unavailable and ResourceExhausted with RetryInfo are retried.
func grpcCode(status int) codes.Code {
	switch status {
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusUnsupportedMediaType:
		return codes.Unimplemented
	}
	return codes.InvalidArgument
}

// exportOTLP checks, decodes and converts one request and produces its
// records. Profiles the pipeline cannot store are reported in the
// response's partial success; when no profile can be stored it is a 400.
func (s *Server) exportOTLP(body []byte, isJSON bool, tenant, client string) (pprofileotlp.ExportResponse, *failure) {
	resp := pprofileotlp.NewExportResponse()
	req := pprofileotlp.NewExportRequest()
	if isJSON {
		if len(body) > maxOTLPJSONBytes {
			return resp, fail(http.StatusRequestEntityTooLarge, "decoded_too_large", "JSON body of %d bytes is larger than %d: send protobuf (%s)", len(body), maxOTLPJSONBytes, contentProto)
		}
		if err := req.UnmarshalJSON(body); err != nil {
			return resp, fail(http.StatusBadRequest, "bad_otlp", "not an OTLP ExportProfilesServiceRequest in JSON: %v", err)
		}
	} else {
		if err := otlp.Check(body, s.opts.OTLP); err != nil {
			if errors.Is(err, record.ErrTooLarge) {
				return resp, fail(http.StatusRequestEntityTooLarge, "decoded_too_large", "%v (OTLP limits, docs/INGEST.md)", err)
			}
			return resp, fail(http.StatusBadRequest, "bad_otlp", "%v", err)
		}
		if err := req.UnmarshalProto(body); err != nil {
			return resp, fail(http.StatusBadRequest, "bad_otlp", "not an OTLP ExportProfilesServiceRequest: %v", err)
		}
	}
	profs, rejected, err := otlp.Convert(req.Profiles())
	switch {
	case errors.Is(err, convert.ErrInvalidTag):
		return resp, fail(http.StatusBadRequest, "bad_tag", "%v", err)
	case err != nil:
		return resp, fail(http.StatusBadRequest, "bad_otlp", "%v", err)
	}
	var recs []keyedRecord
	stored := 0
	for _, p := range profs {
		s.m.profiles.WithLabelValues("otlp").Inc()
		host := p.Host
		if host == "" {
			host = client
		}
		out, err := convert.Pprof(p.Pprof, convert.Push{Tenant: tenant, Host: host}, s.opts.Convert)
		if err != nil {
			rejected = append(rejected, otlp.Rejected{Where: p.Where, Err: err})
			continue
		}
		agent := "otlp"
		if p.Agent != "" {
			agent += "/" + record.TruncateUTF8(p.Agent, 64)
		}
		for _, rc := range out {
			recs = append(recs, keyedRecord{Record: rc, host: host, agent: agent})
		}
		stored++
	}
	if len(profs) == 0 && len(rejected) == 0 {
		s.m.empty.Inc()
		return resp, nil
	}
	var msgs []string
	reason := ""
	for _, r := range rejected {
		reason = otlpRejectReason(r.Err)
		s.m.otlpRejected.WithLabelValues(reason).Inc()
		if len(msgs) < 4 {
			msgs = append(msgs, r.Where+": "+r.Err.Error())
		}
	}
	msg := strings.Join(msgs, "; ")
	if len(rejected) > len(msgs) {
		msg += fmt.Sprintf("; and %d more", len(rejected)-len(msgs))
	}
	if stored == 0 {
		status := http.StatusBadRequest
		if reason == "decoded_too_large" {
			status = http.StatusRequestEntityTooLarge
		}
		return resp, fail(status, reason, "no profile of the request can be stored: %s", msg)
	}
	if f := s.produce(recs); f != nil {
		return resp, f
	}
	if len(rejected) > 0 {
		resp.PartialSuccess().SetRejectedProfiles(int64(len(rejected)))
		resp.PartialSuccess().SetErrorMessage(msg)
	}
	return resp, nil
}

func otlpRejectReason(err error) string {
	switch {
	case errors.Is(err, convert.ErrUnsupported):
		return "unsupported_type"
	case errors.Is(err, record.ErrTimeOutOfRange):
		return "time_out_of_range"
	case errors.Is(err, record.ErrTooLarge):
		return "decoded_too_large"
	}
	return "bad_profile"
}

// GRPC returns a gRPC server of the OTLP profiles service
// (opentelemetry.proto.collector.profiles.v1development.ProfilesService):
// messages up to the body limit, gzip accepted, credentials checked from
// the "authorization" metadata before the message is read.
func (s *Server) GRPC(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxRecvMsgSize(int(s.opts.MaxBodyBytes)),
		grpc.MaxConcurrentStreams(uint32(max(4, 2*cap(s.slots)))),
		// As the HTTP server's header limits and time-outs.
		grpc.MaxHeaderListSize(64 << 10),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			if _, ok := s.grpcAuth(info.Header); !ok {
				s.refused(endpointOTLPGRPC, fail(http.StatusUnauthorized, "auth", authMessage), "")
				return ctx, status.Error(codes.Unauthenticated, authMessage)
			}
			return ctx, nil
		}),
	}, opts...)
	g := grpc.NewServer(opts...)
	g.RegisterService(&profilesServiceDesc, grpcExporter{s})
	return g
}

// StopGRPC stops g gracefully, waiting for the calls in flight up to
// wait, then closes what is left.
func StopGRPC(g *grpc.Server, wait time.Duration) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		g.Stop()
	}
}

const authMessage = "authentication required: send a token of STACKSTREAM_INGEST_TOKENS as a Bearer token or basic auth password, or the basic auth credentials"

func (s *Server) grpcAuth(md metadata.MD) (string, bool) {
	return s.opts.Auth.Check(&http.Request{Header: http.Header{"Authorization": md.Get("authorization")}})
}

// exportGRPC serves one Export call.
func (s *Server) exportGRPC(ctx context.Context, body []byte) ([]byte, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	client := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		client = p.Addr.String()
		if h, _, err := net.SplitHostPort(client); err == nil {
			client = h
		}
	}
	resp, f := func() (pprofileotlp.ExportResponse, *failure) {
		tenant, ok := s.grpcAuth(md)
		if !ok {
			return pprofileotlp.ExportResponse{}, fail(http.StatusUnauthorized, "auth", authMessage)
		}
		if err := pprofileotlp.ValidateDevelopmentVersion(md.Get(pprofileotlp.DevelopmentVersionHeader)); err != nil {
			return pprofileotlp.ExportResponse{}, fail(http.StatusBadRequest, "bad_otlp", "%v", err)
		}
		if !s.acquire(ctx) {
			return pprofileotlp.ExportResponse{}, &failure{status: http.StatusTooManyRequests, reason: "busy", retry: s.opts.QueueWait,
				msg: fmt.Sprintf("busy: %d pushes are being decoded (STACKSTREAM_INGEST_MAX_CONCURRENT) and none finished within %s: retry later", cap(s.slots), s.opts.QueueWait)}
		}
		defer func() { <-s.slots }()
		return s.exportOTLP(body, false, tenant, client)
	}()
	if f != nil {
		s.refused(endpointOTLPGRPC, f, client)
		st := status.New(grpcCode(f.status), f.msg)
		if f.retry > 0 {
			if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retrySeconds(f.retry)) * time.Second)}); err == nil {
				st = withRetry
			}
		}
		return nil, st.Err()
	}
	s.m.requests.WithLabelValues(endpointOTLPGRPC, "200").Inc()
	return resp.MarshalProto()
}

// The service is registered by hand with a codec that hands over the
// message's bytes, so otlp.Check bounds them before anything decodes them.
type otlpExporter interface {
	exportGRPC(ctx context.Context, body []byte) ([]byte, error)
}

type grpcExporter struct{ s *Server }

func (g grpcExporter) exportGRPC(ctx context.Context, body []byte) ([]byte, error) {
	return g.s.exportGRPC(ctx, body)
}

var profilesServiceDesc = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.profiles.v1development.ProfilesService",
	HandlerType: (*otlpExporter)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Export",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in rawMessage
			if err := dec(&in); err != nil {
				return nil, err
			}
			out, err := srv.(otlpExporter).exportGRPC(ctx, in)
			if err != nil {
				return nil, err
			}
			return rawMessage(out), nil
		},
	}},
	Metadata: "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto",
}

type rawMessage []byte

// rawCodec passes messages as bytes. It is named proto, the codec gRPC
// clients ask for.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*m = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
