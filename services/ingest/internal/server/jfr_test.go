package server_test

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
)

// agentJFR is the gzipped recording the Pyroscope Java agent uploaded.
func agentJFR(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../jfr/testdata/agent.jfr.gz")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jfrForm is the agent's multipart body: the gzipped recording as "jfr".
func jfrForm(t testing.TB, jfr []byte) ([]byte, string) {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("jfr", "jfr")
	fw.Write(jfr)
	mw.Close()
	return mp.Bytes(), mw.FormDataContentType()
}

func jfrQuery(now time.Time) url.Values {
	return url.Values{"from": {fmt.Sprint(now.Add(-2 * time.Second).Unix())}, "until": {fmt.Sprint(now.Unix())},
		"format": {"jfr"}, "spyName": {"javaspy"}, "sampleRate": {"100"}, "units": {"samples"}, "aggregationType": {"sum"}}
}

// TestIngestJFR: the agent's multipart JFR becomes a cpu and an alloc
// record on the real broker, keyed by the hostname tag, with the tags as
// labels and the Java frames on the [java] pseudo-file with lines.
func TestIngestJFR(t *testing.T) {
	env := ingesttest.Setup(t, nil)
	body, ct := jfrForm(t, agentJFR(t))
	code, msg, _ := post(t, ingestURL(env.URL, "javaapp{env=test,hostname=java-host,otel.scope.name=com.grafana.pyroscope/java}", jfrQuery(time.Now())), ct, body)
	if code != 200 {
		t.Fatalf("jfr: %d %s", code, msg)
	}
	recs := env.Read(t, 2, 30*time.Second)
	byType := map[record.ProfileType]ingesttest.Record{}
	for _, r := range recs {
		byType[r.Meta.Type] = r
		if r.Key != "java-host" || r.Meta.AgentVersion != "pyroscope/javaspy" {
			t.Errorf("record %s: key %q meta %+v", r.Meta.Type, r.Key, r.Meta)
		}
		for k, want := range map[string]string{"service": "javaapp", "env": "test", "otel_scope_name": "com.grafana.pyroscope/java"} {
			if got := ingesttest.Label(r.Profile, k); got != want {
				t.Errorf("%s label %s = %q, want %q", r.Meta.Type, k, got, want)
			}
		}
	}
	cpu, alloc := byType[record.ProfileCPU], byType[record.ProfileAlloc]
	if cpu.Profile == nil || alloc.Profile == nil {
		t.Fatalf("records %v, want cpu and alloc", byType)
	}
	if fn := ingesttest.Functions(cpu.Profile); !fn["Hot.hotLoop"] || !fn["Hot.main"] {
		t.Errorf("cpu functions = %v", fn)
	}
	if fn := ingesttest.Functions(alloc.Profile); !fn["Hot.allocate"] {
		t.Errorf("alloc functions = %v", fn)
	}
	var samples, nanos int64
	for _, s := range cpu.Profile.Sample {
		samples += s.Value[0]
		nanos += s.Value[1]
	}
	if samples != 130 || nanos != 130*10e6 {
		t.Errorf("cpu = %d samples, %d ns; want the recording's 130 samples at 10 ms", samples, nanos)
	}
	for _, loc := range cpu.Profile.Location {
		if loc.Mapping == nil || loc.Mapping.File != record.MappingJava || !loc.Mapping.HasFunctions {
			t.Fatalf("location %v: mapping %+v, want %s with functions", loc.Line, loc.Mapping, record.MappingJava)
		}
		if ln := loc.Line[0]; ln.Function.Name == "Hot.hotLoop" && ln.Line != 5 {
			t.Errorf("Hot.hotLoop at line %d, want 5", ln.Line)
		}
	}
}

// TestIngestJFRBad: broken recordings are 400s naming what is wrong;
// a raw (not multipart) body is read too.
func TestIngestJFRBad(t *testing.T) {
	env := ingesttest.Setup(t, nil)
	raw := agentJFR(t)
	u := ingestURL(env.URL, "javaapp{hostname=h}", jfrQuery(time.Now()))
	code, msg, _ := post(t, u, "application/octet-stream", raw)
	if code != 200 {
		t.Errorf("raw gzipped JFR: %d %s", code, msg)
	}
	noJFR, ct := func() ([]byte, string) {
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		fw, _ := mw.CreateFormFile("profile", "p")
		fw.Write([]byte("x"))
		mw.Close()
		return mp.Bytes(), mw.FormDataContentType()
	}()
	for _, c := range []struct {
		name, ct string
		body     []byte
		code     int
		want     string
	}{
		{"no jfr field", ct, noJFR, 400, `no "jfr" field`},
		{"not gzip after magic", "", []byte{0x1f, 0x8b, 1, 2}, 400, "gzip"},
		{"truncated", "", []byte("FLR\x00\x00\x02\x00\x00"), 400, "chunk header"},
	} {
		code, msg, _ := post(t, u, c.ct, c.body)
		if code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %s, want %d containing %q", c.name, code, msg, c.code, c.want)
		}
	}
}
