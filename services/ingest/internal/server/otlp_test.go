package server_test

import (
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/otlp"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

func grpcExport(t *testing.T, addr string, pd pprofile.Profiles, md ...string) (pprofileotlp.ExportResponse, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd), grpc.UseCompressor(gzip.Name))
}

func otlpBody(t *testing.T, pd pprofile.Profiles, json bool) []byte {
	t.Helper()
	req := pprofileotlp.NewExportRequestFromProfiles(pd)
	var b []byte
	var err error
	if json {
		b, err = req.MarshalJSON()
	} else {
		b, err = req.MarshalProto()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkEBPFRecord checks the record of ingesttest.EBPFProfilerRequest's
// CPU profile as the consumers decode it.
func checkEBPFRecord(t *testing.T, r ingesttest.Record, tenant string) {
	t.Helper()
	if r.Key != ingesttest.OTLPHost || r.Meta.Type != record.ProfileCPU || r.Meta.AgentVersion != "otlp/"+ingesttest.OTLPScope {
		t.Fatalf("record key %q type %q agent %q", r.Key, r.Meta.Type, r.Meta.AgentVersion)
	}
	p := r.Profile
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) != 2 || p.SampleType[1].Type != "cpu" || p.Period != ingesttest.OTLPPeriodNs {
		t.Fatalf("sample types %v period %d", p.SampleType, p.Period)
	}
	bySvc := map[string]*profile.Sample{}
	for _, s := range p.Sample {
		bySvc[s.Label["service"][0]+"/"+s.Location[0].Line[0].Function.Name] = s
		want := map[string]string{"container_id": "c0ffee", "k8s_pod": "web-0", "k8s_namespace": "prod", "pid": "4242",
			"deployment_environment": "prod", "tenant": tenant}
		for k, v := range want {
			if got := strings.Join(s.Label[k], ","); got != v {
				t.Errorf("sample %v: label %s=%q, want %q", s.Location[0].Line, k, got, v)
			}
		}
		if _, ok := s.Label["thread_id"]; ok {
			t.Errorf("thread.id kept as a label")
		}
	}
	// Values: events (timestamps) or values, times the 50 ms period.
	for key, want := range map[string]int64{
		"checkout/handle_request": 3,
		"cart-jvm/do_syscall_64":  2,
		"checkout/render":         1,
	} {
		s := bySvc[key]
		if s == nil {
			t.Fatalf("no sample %s in %v", key, bySvc)
		}
		if s.Value[0] != want || s.Value[1] != want*ingesttest.OTLPPeriodNs {
			t.Errorf("%s: values %v, want %d samples", key, s.Value, want)
		}
	}
	// Frames: interpreted ones named on the pseudo-files, native ones on
	// their mapping with the GNU build ID and the address, unnamed.
	kinds := map[string]string{}
	for _, loc := range p.Location {
		name := fmt.Sprintf("0x%x", loc.Address)
		if len(loc.Line) > 0 {
			name = loc.Line[0].Function.Name
		}
		kinds[name] = loc.Mapping.File
		if len(loc.Line) == 0 && (loc.Mapping.HasFunctions || loc.Mapping.File == "") {
			t.Errorf("native frame %s on mapping %+v", name, loc.Mapping)
		}
	}
	want := map[string]string{
		"handle_request": record.MappingPython, "<module>": record.MappingPython,
		"com.example.Cart.total": record.MappingJava, "render": record.MappingJS,
		"Rack::Handler#call": record.MappingJIT, "do_syscall_64": record.MappingKernel,
		"0x2a1f0": "libpython3.12.so.1.0", "0x401234": "stripped-tool",
	}
	for name, file := range want {
		if kinds[name] != file {
			t.Errorf("frame %s on %q, want %q (all: %v)", name, kinds[name], file, kinds)
		}
	}
	for _, m := range p.Mapping {
		if m.File == "libpython3.12.so.1.0" && (m.BuildID != ingesttest.OTLPBuildID || m.Start != 0x1000 || m.Offset != 0x1000) {
			t.Errorf("native mapping %+v", m)
		}
		if m.File == "stripped-tool" && m.BuildID != "" {
			t.Errorf("a mapping without a GNU build ID got %q", m.BuildID)
		}
	}
	if time.Since(time.Unix(0, p.TimeNanos)) > time.Minute || p.DurationNanos != int64(5*time.Second) {
		t.Errorf("time %v duration %v", time.Unix(0, p.TimeNanos), time.Duration(p.DurationNanos))
	}
}

// TestOTLP sends the eBPF-profiler-like request built with pdata over real
// gRPC (gzip) and HTTP (protobuf and JSON) with a tenant's token, and reads
// each back from the real broker.
func TestOTLP(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) { o.Auth = server.NewAuth(map[string]string{"tok-a": "team-a"}, "", "") })
	now := time.Now()

	// Over gRPC with a wall-clock profile too, which no record type holds:
	// it comes back in the partial success, the others are stored.
	b, _ := ingesttest.EBPFProfilerBuilder(now)
	wall := b.Profile(map[string]string{"host.name": ingesttest.OTLPHost}, "wall", "nanoseconds", now)
	b.Sample(wall, b.Stack(b.Frame("cpython", "f", "f.py", 1, 0, 1)), nil, []int64{5}, 0, now)
	resp, err := grpcExport(t, env.GRPCAddr, b.PD, "authorization", "Bearer tok-a")
	if err != nil {
		t.Fatalf("grpc export: %v", err)
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() != 1 || !strings.Contains(ps.ErrorMessage(), "sample type wall/nanoseconds") {
		t.Errorf("grpc partial success: %d %q, want the wall profile rejected", ps.RejectedProfiles(), ps.ErrorMessage())
	}
	for _, json := range []bool{false, true} {
		ct := "application/x-protobuf"
		if json {
			ct = "application/json"
		}
		// Protobuf gzipped, as the collector's otlphttp exporter sends it.
		raw, hdrs := otlpBody(t, ingesttest.EBPFProfilerRequest(now), json), []string{"Authorization", "Bearer tok-a"}
		if !json {
			var zb bytes.Buffer
			zw := stdgzip.NewWriter(&zb)
			zw.Write(raw)
			zw.Close()
			raw, hdrs = zb.Bytes(), append(hdrs, "Content-Encoding", "gzip")
		}
		code, body, hdr := post(t, env.URL+server.OTLPPath, ct, raw, hdrs...)
		if code != 200 || hdr.Get("Content-Type") != ct {
			t.Fatalf("http %s: %d %s %q", ct, code, body, hdr.Get("Content-Type"))
		}
		got := pprofileotlp.NewExportResponse()
		if json {
			err = got.UnmarshalJSON([]byte(body))
		} else {
			err = got.UnmarshalProto([]byte(body))
		}
		if err != nil || got.PartialSuccess().RejectedProfiles() != 0 {
			t.Errorf("http %s response: %v, rejected %d", ct, err, got.PartialSuccess().RejectedProfiles())
		}
	}
	recs := env.Read(t, 6, 30*time.Second)
	if len(recs) != 6 {
		t.Fatalf("read %d records, want 6 (cpu and offcpu of grpc, http protobuf, http json)", len(recs))
	}
	for _, r := range recs {
		if r.Meta.Type == record.ProfileCPU {
			checkEBPFRecord(t, r, "team-a")
			continue
		}
		// The off-CPU profile: one block of 1.5 ms with the Python stack.
		p := r.Profile
		if r.Meta.Type != record.ProfileOffCPU || r.Key != ingesttest.OTLPHost || len(p.Sample) != 1 ||
			p.SampleType[1].Type != "offcpu" || p.Sample[0].Value[0] != 1 || p.Sample[0].Value[1] != 1500000 ||
			p.Sample[0].Location[0].Mapping.File != record.MappingPython {
			t.Errorf("off-CPU record %s %s: %v", r.Key, r.Meta.Type, p)
		}
	}
}

// TestOTLPRefused checks each refusal over both transports: its status,
// gRPC code and message, and that nothing was stored.
func TestOTLPRefused(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) {
		o.Auth = server.NewAuth(map[string]string{"tok-a": "team-a"}, "", "")
		o.OTLP = otlp.DefaultLimits()
		o.OTLP.MaxSamples = 2
	})
	now := time.Now()
	onlyWall := ingesttest.NewOTLPBuilder()
	wall := onlyWall.Profile(map[string]string{"host.name": "h"}, "wall", "nanoseconds", now)
	onlyWall.Sample(wall, onlyWall.Stack(onlyWall.Frame("cpython", "f", "f.py", 1, 0, 1)), nil, []int64{5}, 0, now)
	oneSample := func(at time.Time, attr string) pprofile.Profiles {
		b := ingesttest.NewOTLPBuilder()
		p := b.Profile(map[string]string{"host.name": "h"}, "cpu", "nanoseconds", at)
		var attrs []int32
		if attr != "" {
			attrs = append(attrs, b.Attr(attr, "x"))
		}
		b.Sample(p, b.Stack(b.Frame("cpython", "f", "f.py", 1, 0, 1)), attrs, []int64{5}, 0, at)
		return b.PD
	}
	badStack := oneSample(now, "")
	badStack.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetStackIndex(99)
	body := func(pd pprofile.Profiles) []byte { return otlpBody(t, pd, false) }

	cases := []struct {
		name     string
		pd       pprofile.Profiles
		raw      []byte
		token    string
		status   int
		code     codes.Code
		contains string
	}{
		{"no token", oneSample(now, ""), nil, "", 401, codes.Unauthenticated, "authentication required"},
		{"not protobuf", pprofile.Profiles{}, []byte("\xff\xff\xff"), "tok-a", 400, codes.InvalidArgument, "invalid OTLP"},
		{"too many samples", ingesttest.EBPFProfilerRequest(now), nil, "tok-a", 413, codes.InvalidArgument, "more than 2 samples"},
		{"only wall", onlyWall.PD, nil, "tok-a", 400, codes.InvalidArgument, "sample type wall/nanoseconds"},
		{"stack out of range", badStack, nil, "tok-a", 400, codes.InvalidArgument, "stack index 99"},
		{"bad attribute key", oneSample(now, "a/b"), nil, "tok-a", 400, codes.InvalidArgument, `attribute key "a/b"`},
		{"too old", oneSample(now.Add(-30*24*time.Hour), ""), nil, "tok-a", 400, codes.InvalidArgument, "time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := c.raw
			if raw == nil {
				raw = body(c.pd)
			}
			hdr := []string{}
			md := []string{}
			if c.token != "" {
				hdr = []string{"Authorization", "Bearer " + c.token}
				md = []string{"authorization", "Bearer " + c.token}
			}
			code, msg, _ := post(t, env.URL+server.OTLPPath, "application/x-protobuf", raw, hdr...)
			if code != c.status || !strings.Contains(msg, c.contains) {
				t.Errorf("http: %d %q, want %d with %q", code, msg, c.status, c.contains)
			}
			if c.raw != nil {
				return // pdata's client cannot send bytes that are not a request
			}
			_, err := grpcExport(t, env.GRPCAddr, c.pd, md...)
			if st := status.Convert(err); st.Code() != c.code || !strings.Contains(st.Message(), c.contains) {
				t.Errorf("grpc: %v, want %s with %q", err, c.code, c.contains)
			}
		})
	}
	bigJSON := append([]byte(`{"resourceProfiles":[]`), bytes.Repeat([]byte(" "), 4<<20)...)
	code, msg, _ := post(t, env.URL+server.OTLPPath, "application/json", append(bigJSON, '}'), "Authorization", "Bearer tok-a")
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "JSON body") {
		t.Errorf("JSON over 4 MiB: %d %s", code, msg)
	}
	code, msg, _ = post(t, env.URL+server.OTLPPath, "text/plain", body(oneSample(now, "")), "Authorization", "Bearer tok-a")
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", code, msg)
	}
	code, msg, _ = post(t, env.URL+server.OTLPPath, "application/x-protobuf", body(oneSample(now, "")),
		"Authorization", "Bearer tok-a", pprofileotlp.DevelopmentVersionHeader, "7")
	if code != 400 || !strings.Contains(msg, "version") {
		t.Errorf("version 7: %d %s", code, msg)
	}
	if recs := env.ReadAll(t, 10*time.Second); len(recs) != 0 {
		t.Errorf("%d records stored from refused requests", len(recs))
	}
}

// TestOTLPBufferFull: with Kafka unreachable, the first request's records
// wait in the producer's buffer (of one record); the next is refused at
// once as OTLP clients retry it (HTTP 429 with Retry-After and a
// google.rpc.Status body; gRPC ResourceExhausted with RetryInfo), and the
// first gets Unavailable with RetryInfo once its delivery times out.
func TestOTLPBufferFull(t *testing.T) {
	cl, err := kgo.NewClient(append(server.ProducerOpts(1<<20, 1, time.Second), kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	opts := ingesttest.Options("nowhere.profiles.raw", nil)
	opts.ProduceTimeout = time.Second
	s := server.NewServer(cl, opts, prometheusRegistry(), discard())
	url := httptestServer(t, s.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.GRPC()
	go g.Serve(ln)
	defer g.Stop()

	pd := func() pprofile.Profiles {
		b := ingesttest.NewOTLPBuilder()
		p := b.Profile(map[string]string{"host.name": "h"}, "cpu", "nanoseconds", time.Now())
		b.Sample(p, b.Stack(b.Frame("cpython", "f", "f.py", 1, 0, 1)), nil, []int64{5}, 0, time.Now())
		return b.PD
	}
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { _, first = grpcExport(t, ln.Addr().String(), pd()) })
	for cl.BufferedProduceRecords() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	code, body, hdr := post(t, url+server.OTLPPath, "application/x-protobuf", otlpBody(t, pd(), false))
	st := &spb.Status{}
	if code != 429 || hdr.Get("Retry-After") != "5" || proto.Unmarshal([]byte(body), st) != nil ||
		codes.Code(st.Code) != codes.ResourceExhausted || !strings.Contains(st.Message, "buffer") {
		t.Errorf("http: %d Retry-After %q status %v", code, hdr.Get("Retry-After"), st)
	}
	_, err = grpcExport(t, ln.Addr().String(), pd())
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || retryDelay(s) != 5*time.Second {
		t.Errorf("grpc: %v (retry %v), want ResourceExhausted with RetryInfo 5s", err, retryDelay(s))
	}
	wg.Wait()
	if s := status.Convert(first); s.Code() != codes.Unavailable || retryDelay(s) == 0 {
		t.Errorf("first request: %v, want Unavailable with RetryInfo after the delivery timeout", first)
	}
}

func retryDelay(s *status.Status) time.Duration {
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
