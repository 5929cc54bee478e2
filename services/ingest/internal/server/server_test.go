package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

func post(t *testing.T, u, contentType string, body []byte, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func ingestURL(base, name string, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("name", name)
	return base + "/ingest?" + q.Encode()
}

func encode(t *testing.T, p *profile.Profile) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// goCPU is a CPU profile as the Go runtime writes it: a mapping of the
// binary with its build ID, locations with addresses and lines.
func goCPU(now time.Time) *profile.Profile {
	p := pproftest.NewCPU(now.Add(-10*time.Second), 10*time.Second).
		Sample(nil, []int64{30, 300e6}, "main.hot", "main.main").
		Sample(map[string]string{"span": "1", "tenant": "spoofed"}, []int64{2, 20e6}, "main.cold", "main.main").Profile()
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x800000, File: "/srv/app", BuildID: "abcd"}
	p.Mapping = []*profile.Mapping{m}
	for i, loc := range p.Location {
		loc.Mapping, loc.Address = m, 0x401000+uint64(i)*16
	}
	return p
}

func TestIngestFormats(t *testing.T) {
	env := ingesttest.Setup(t, nil)
	now := time.Now()
	from := fmt.Sprint(now.Add(-10 * time.Second).Unix())
	until := fmt.Sprint(now.Unix())

	// folded, the old SDKs' format, CPU at 100 Hz.
	folded := "main;work;hot 30\nmain;idle 2\n"
	q := url.Values{"from": {from}, "until": {until}, "sampleRate": {"100"}, "format": {"folded"}, "spyName": {"pyspy"}}
	code, body, _ := post(t, ingestURL(env.URL, "checkout.cpu{env=prod,hostname=web-1,__session_id__=s1}", q), "binary/octet-stream", []byte(folded))
	if code != 200 {
		t.Fatalf("folded: %d %s", code, body)
	}
	// pprof, gzip, with the Go SDK's nanosecond times.
	q = url.Values{"from": {fmt.Sprint(now.Add(-10 * time.Second).UnixNano())}, "until": {fmt.Sprint(now.UnixNano())}, "format": {"pprof"}, "spyName": {"gospy"}}
	code, body, _ = post(t, ingestURL(env.URL, "goapp{region=eu}", q), "", encode(t, goCPU(now)))
	if code != 200 {
		t.Fatalf("pprof: %d %s", code, body)
	}
	// The Go SDK's multipart form: a heap profile and its sample_type_config.
	heap := pproftest.New([]*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
		{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}}, now.Add(-10*time.Second), 10*time.Second).
		Sample(nil, []int64{5, 500, 1, 100}, "main.alloc", "main.main").Profile()
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("profile", "profile.pprof")
	fw.Write(encode(t, heap))
	fw, _ = mw.CreateFormFile("sample_type_config", "sample_type_config.json")
	json.NewEncoder(fw).Encode(map[string]any{"alloc_space": map[string]any{"units": "bytes"}, "inuse_space": map[string]any{"units": "bytes", "aggregation": "average"}})
	mw.Close()
	code, body, _ = post(t, ingestURL(env.URL, "goapp{hostname=web-2}", url.Values{"spyName": {"gospy"}}), mw.FormDataContentType(), mp.Bytes())
	if code != 200 {
		t.Fatalf("multipart: %d %s", code, body)
	}

	recs := env.Read(t, 4, 30*time.Second)
	if len(recs) != 4 {
		t.Fatalf("read %d records, want 4", len(recs))
	}
	byKey := map[string]ingesttest.Record{}
	for _, r := range recs {
		byKey[r.Key+"/"+string(r.Meta.Type)] = r
	}

	f := byKey["web-1/cpu"]
	if f.Profile == nil {
		t.Fatalf("no folded record keyed web-1: %v", byKey)
	}
	if f.Meta.Host != "web-1" || f.Meta.AgentVersion != "pyroscope/pyspy" {
		t.Errorf("folded meta = %+v", f.Meta)
	}
	for k, want := range map[string]string{"service": "checkout", "env": "prod", "session_id": "s1", "hostname": ""} {
		if got := ingesttest.Label(f.Profile, k); got != want {
			t.Errorf("folded label %s = %q, want %q", k, got, want)
		}
	}
	if fn := ingesttest.Functions(f.Profile); !fn["hot"] || !fn["main"] {
		t.Errorf("folded functions = %v", fn)
	}
	if f.Profile.TimeNanos != now.Add(-10*time.Second).Truncate(time.Second).UnixNano() || f.Profile.DurationNanos != int64(10*time.Second) {
		t.Errorf("folded time = %d + %d", f.Profile.TimeNanos, f.Profile.DurationNanos)
	}
	for _, s := range f.Profile.Sample {
		if s.Location[0].Line[0].Function.Name == "hot" && (s.Value[0] != 30 || s.Value[1] != 30*1e7) {
			t.Errorf("hot values = %v, want [30 300000000]", s.Value)
		}
	}
	for _, loc := range f.Profile.Location {
		if loc.Mapping == nil || loc.Mapping.File != record.MappingPython || !loc.Mapping.HasFunctions {
			t.Errorf("pyspy frame mapping = %+v, want %s with functions", loc.Mapping, record.MappingPython)
		}
	}

	g := byKey["127.0.0.1/cpu"]
	if g.Profile == nil {
		t.Fatalf("no pprof record keyed by the client address: %v", byKey)
	}
	if ingesttest.Label(g.Profile, "service") != "goapp" || ingesttest.Label(g.Profile, "region") != "eu" || ingesttest.Label(g.Profile, "tenant") != "" {
		t.Errorf("pprof labels: %v", g.Profile.Sample[1].Label)
	}
	for _, smp := range g.Profile.Sample {
		if smp.Label["tenant"] != nil {
			t.Errorf("a tenant label the client sent survived: %v", smp.Label)
		}
		if smp.Label["span"] == nil && len(smp.Location) == 2 && smp.Location[0].Line[0].Function.Name == "main.cold" {
			t.Errorf("the sample's own label span was dropped: %v", smp.Label)
		}
	}
	if !g.Profile.Mapping[0].HasFunctions {
		t.Errorf("a mapping whose frames carry functions must be marked HasFunctions: %+v", g.Profile.Mapping[0])
	}
	if fn := ingesttest.Functions(g.Profile); !fn["main.hot"] {
		t.Errorf("pprof functions = %v", fn)
	}

	for _, typ := range []record.ProfileType{record.ProfileHeap, record.ProfileAlloc} {
		h := byKey["web-2/"+string(typ)]
		if h.Profile == nil || len(h.Profile.SampleType) != 4 || ingesttest.Label(h.Profile, "service") != "goapp" {
			t.Errorf("multipart %s record = %+v", typ, h)
		}
	}
}

func TestPushAPI(t *testing.T) {
	env := ingesttest.Setup(t, nil)
	p := pproftest.New([]*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}, time.Now().Add(-10*time.Second), 10*time.Second).
		Sample(map[string]string{"thread_name": "MainThread"}, []int64{1e7 * 40}, "hot_function", "<module>").Profile()
	raw := encode(t, p)
	req := pushRequest(map[string]string{"__name__": "process_cpu", "service_name": "pyapp", "hostname": "py-1", "otel.scope.name": "com.grafana.pyroscope/python"}, raw)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(req)
	zw.Close()
	code, body, hdr := post(t, env.URL+"/push.v1.PusherService/Push", "application/proto", gz.Bytes(),
		"Content-Encoding", "gzip", "User-Agent", "pyroscope-rs/pyspy/1.4.0 reqwest")
	if code != 200 || hdr.Get("Content-Type") != "application/proto" {
		t.Fatalf("push: %d %s %v", code, body, hdr)
	}
	recs := env.Read(t, 1, 30*time.Second)
	if len(recs) != 1 {
		t.Fatalf("read %d records", len(recs))
	}
	r := recs[0]
	if r.Key != "py-1" || r.Meta.Type != record.ProfileCPU || ingesttest.Label(r.Profile, "service") != "pyapp" ||
		ingesttest.Label(r.Profile, "otel_scope_name") != "com.grafana.pyroscope/python" || ingesttest.Label(r.Profile, "thread_name") != "MainThread" {
		t.Fatalf("record %s %+v labels %v", r.Key, r.Meta, r.Profile.Sample[0].Label)
	}
	if !ingesttest.Functions(r.Profile)["hot_function"] || r.Profile.Location[0].Mapping.File != record.MappingPython {
		t.Fatalf("frames: %v", r.Profile.Location[0])
	}

	code, body, _ = post(t, env.URL+"/push.v1.PusherService/Push", "application/json", []byte("{}"))
	if code != 415 || !strings.Contains(body, `"code":"unimplemented"`) {
		t.Fatalf("json push: %d %s", code, body)
	}
}

func TestRejects(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) {
		o.MaxBodyBytes = 64 << 10
		o.Convert.Limits.MaxSamples = 100
		o.Auth = server.NewAuth(map[string]string{"tokA": "team-a", "plain": ""}, "", "")
	})
	bearer := []string{"Authorization", "Bearer tokA"}
	folded := []byte("a;b 1\n")
	mutex := pproftest.New([]*profile.ValueType{{Type: "contentions", Unit: "count"}, {Type: "delay", Unit: "nanoseconds"}}, time.Now(), time.Second).
		Sample(nil, []int64{1, 2}, "sync.(*Mutex).Lock").Profile()
	var many strings.Builder
	for i := range 101 {
		fmt.Fprintf(&many, "f%d 1\n", i)
	}
	old := fmt.Sprint(time.Now().Add(-30 * 24 * time.Hour).Unix())
	tests := []struct {
		name   string
		url    string
		body   []byte
		hdr    []string
		code   int
		reason string
		msg    string
	}{
		{"no credentials", ingestURL(env.URL, "app.cpu", nil), folded, nil, 401, "auth", "authentication required"},
		{"wrong token", ingestURL(env.URL, "app.cpu", nil), folded, []string{"Authorization", "Bearer nope"}, 401, "auth", ""},
		{"bad name", ingestURL(env.URL, "app{a", nil), folded, bearer, 400, "bad_name", "do not end with }"},
		{"bad tag key", ingestURL(env.URL, "app{1a=b}", nil), folded, bearer, 400, "bad_tag", `key "1a"`},
		{"wall is not stored", ingestURL(env.URL, "app.wall", nil), folded, bearer, 400, "unsupported_type", `"wall"`},
		{"mutex is not stored", ingestURL(env.URL, "app", url.Values{"format": {"pprof"}}), encode(t, mutex), bearer, 400, "unsupported_type", "contentions/count"},
		{"not pprof", ingestURL(env.URL, "app", url.Values{"format": {"pprof"}}), []byte("hello"), bearer, 400, "bad_profile", "neither protobuf"},
		{"bad format", ingestURL(env.URL, "app", url.Values{"format": {"speedscope"}}), folded, bearer, 400, "bad_format", `format="speedscope"`},
		{"not jfr", ingestURL(env.URL, "app", url.Values{"format": {"jfr"}}), folded, bearer, 400, "bad_profile", "FLR"},
		{"bad folded", ingestURL(env.URL, "app", nil), []byte("a;b\n"), bearer, 400, "bad_profile", "no count"},
		{"too old", ingestURL(env.URL, "app", url.Values{"from": {old}}), folded, bearer, 400, "time_out_of_range", "before now"},
		{"bad from", ingestURL(env.URL, "app", url.Values{"from": {"yesterday"}}), folded, bearer, 400, "bad_time", "from:"},
		{"body over the limit", ingestURL(env.URL, "app", nil), bytes.Repeat([]byte("a 1\n"), 20000), bearer, 413, "body_too_large", "larger than 65536"},
		{"decoded over the limits", ingestURL(env.URL, "app", nil), []byte(many.String()), bearer, 413, "decoded_too_large", "more than 100 distinct stacks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := post(t, tt.url, "", tt.body, tt.hdr...)
			if code != tt.code || !strings.Contains(body, tt.msg) {
				t.Fatalf("%d %q, want %d containing %q", code, body, tt.code, tt.msg)
			}
		})
	}
	// A token's tenant is the tenant label, whatever the client says.
	code, body, _ := post(t, ingestURL(env.URL, "app.cpu{tenant=other}", nil), "", folded, bearer...)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	code, body, _ = post(t, ingestURL(env.URL, "app2.cpu", nil), "", folded, "Authorization", "Basic "+basic("anyone", "plain"))
	if code != 200 {
		t.Fatalf("token as basic auth password: %d %s", code, body)
	}
	recs := env.Read(t, 2, 30*time.Second)
	tenants := map[string]string{}
	for _, r := range recs {
		tenants[ingesttest.Label(r.Profile, "service")] = ingesttest.Label(r.Profile, "tenant")
	}
	if tenants["app"] != "team-a" || tenants["app2"] != "" || len(recs) != 2 {
		t.Fatalf("tenants = %v", tenants)
	}

	resp, err := http.Get(env.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`stackstream_ingest_rejected_requests_total{reason="auth"} 2`, `stackstream_ingest_rejected_requests_total{reason="body_too_large"} 1`,
		`stackstream_ingest_records_total{type="cpu"} 2`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(m), "tokA") {
		t.Error("/metrics shows a token")
	}
}

func basic(u, p string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(u, p)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestSplit: a profile larger than a record may be goes out in parts that
// together hold every sample.
func TestSplit(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) { o.Convert.MaxRecordBytes = 64 << 10 })
	var b strings.Builder
	for i := range 6000 {
		fmt.Fprintf(&b, "main;handler_%d;leaf_%d_%x 1\n", i, i, i*7919)
	}
	code, body, _ := post(t, ingestURL(env.URL, "big.cpu{hostname=h}", nil), "", []byte(b.String()))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	recs := env.ReadAll(t, 30*time.Second)
	total, parts := 0, map[string]bool{}
	for _, r := range recs {
		total += len(r.Profile.Sample)
		parts[r.Part] = true
	}
	if len(recs) < 2 || total != 6000 || len(parts) != len(recs) || parts[""] {
		t.Fatalf("%d records, %d samples, parts %v", len(recs), total, parts)
	}
}

// TestBufferFull: with Kafka unreachable, the records of the first push wait
// in the producer's buffer (of one record); the next push gets 429 with
// Retry-After at once, and the first 503 once its delivery times out.
func TestBufferFull(t *testing.T) {
	cl, err := kgo.NewClient(append(server.ProducerOpts(1<<20, 1, time.Second), kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	opts := ingesttest.Options("nowhere.profiles.raw", nil)
	opts.ProduceTimeout = time.Second
	h := server.New(cl, opts, prometheusRegistry(), discard())
	srv := httptestServer(t, h)
	var wg sync.WaitGroup
	var first int
	wg.Go(func() { first, _, _ = post(t, ingestURL(srv, "a.cpu", nil), "", []byte("a 1\n")) })
	for cl.BufferedProduceRecords() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	code, body, hdr := post(t, ingestURL(srv, "b.cpu", nil), "", []byte("b 1\n"))
	if code != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "buffer") {
		t.Fatalf("second push: %d %q Retry-After %q", code, body, hdr.Get("Retry-After"))
	}
	wg.Wait()
	if first != 503 {
		t.Fatalf("first push: %d, want 503 after the delivery timeout", first)
	}
}

// TestSlowSender: a client that sends its body slowly holds read budget,
// not the only decode slot; other pushes go through meanwhile.
func TestSlowSender(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) { o.MaxConcurrent = 1 })
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /ingest?name=slow.cpu HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nmain;slow 1\n")
	for i := range 3 {
		code, body, _ := post(t, ingestURL(env.URL, fmt.Sprintf("fast%d.cpu", i), nil), "", []byte("main;fast 1\n"))
		if code != 200 {
			t.Fatalf("push %d while a slow body is received: %d %s", i, code, body)
		}
	}
}
