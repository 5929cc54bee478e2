package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// ackAll is a producer that acknowledges every record at once: the
// handler's own cost, without Kafka.
type ackAll struct{}

func (ackAll) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, nil)
}

// sdkPush is one push as the Go SDK sends it: the query string and the
// multipart body with the profile.
type sdkPush struct {
	query, contentType string
	body               []byte
}

// readSDKPush loads a push captured from pyroscope-go v1.5.0
// (testdata/sdk/<name>.meta: query string, then Content-Type).
func readSDKPush(t testing.TB, name string) sdkPush {
	meta, err := os.ReadFile("../../testdata/sdk/" + name + ".meta")
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile("../../testdata/sdk/" + name + ".body")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(meta), "\n")
	return sdkPush{query: lines[0], contentType: lines[1], body: body}
}

// serviceCPUPush is a CPU profile of a busy Go service as the SDK pushes
// it (testdata/sdk/service-cpu.pprof, written by TestUpdateServiceFixture
// with UPDATE_FIXTURES=true): a few hundred distinct stacks, a typical
// payload (the one captured from the test program burns CPU in one
// function only, so it is smaller).
func serviceCPUPush(t testing.TB) sdkPush {
	prof, err := os.ReadFile("../../testdata/sdk/service-cpu.pprof")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("profile", "profile.pprof")
	fw.Write(prof)
	mw.Close()
	return sdkPush{query: readSDKPush(t, "cpu").query, contentType: mw.FormDataContentType(), body: body.Bytes()}
}

// TestUpdateServiceFixture profiles this process compressing, hashing,
// encoding JSON, matching regexps and sorting on every core for 10 s at
// 100 Hz, as the Go SDK would in a busy service.
func TestUpdateServiceFixture(t *testing.T) {
	if os.Getenv("UPDATE_FIXTURES") != "true" {
		t.Skip("UPDATE_FIXTURES=true rewrites testdata/sdk/service-cpu.pprof")
	}
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	busyService(10 * time.Second)
	pprof.StopCPUProfile()
	if err := os.WriteFile("../../testdata/sdk/service-cpu.pprof", prof.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func busyService(d time.Duration) {
	var wg sync.WaitGroup
	for w := range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			re := regexp.MustCompile(`(\w+)@(\w+)\.com`)
			data := bytes.Repeat([]byte(fmt.Sprintf("user%d@example.com some text %d ", w, w)), 200)
			for end := time.Now().Add(d); time.Now().Before(end); {
				var gz bytes.Buffer
				zw := gzip.NewWriter(&gz)
				zw.Write(data)
				zw.Close()
				sha256.Sum256(data)
				json.Marshal(map[string]any{"a": []int{1, 2, 3}, "b": strings.Repeat("x", 100)})
				re.FindAll(data, -1)
				s := make([]int, 1000)
				for i := range s {
					s[i] = (i * 7919) % 1000
				}
				sort.Ints(s)
			}
		})
	}
	wg.Wait()
}

func (p sdkPush) request(base string) *http.Request {
	q, _ := url.ParseQuery(p.query)
	// A fresh time: the captured one is past the age limit by now.
	now := time.Now()
	q.Set("from", fmt.Sprint(now.Add(-10*time.Second).UnixNano()))
	q.Set("until", fmt.Sprint(now.UnixNano()))
	r, _ := http.NewRequest(http.MethodPost, base+"/ingest?"+q.Encode(), bytes.NewReader(p.body))
	r.Header.Set("Content-Type", p.contentType)
	return r
}

// BenchmarkHandler: one push through the handler (parse, relabel, encode,
// gzip), records acknowledged at once; 1e9/ns-per-op is the pushes per
// second of one core.
func BenchmarkHandler(b *testing.B) {
	for _, tc := range []struct {
		name string
		push sdkPush
	}{
		{"sdk-cpu-captured", readSDKPush(b, "cpu")},
		{"sdk-heap-captured", readSDKPush(b, "heap")},
		{"service-cpu", serviceCPUPush(b)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := ingesttest.Options("bench.profiles.raw", nil)
			h := server.New(ackAll{}, opts, prometheusRegistry(), discard())
			b.SetBytes(int64(len(tc.push.body)))
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, tc.push.request("http://x"))
				if w.Code != 200 {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pushes/s/core")
		})
	}
}

// BenchmarkKafka: pushes over loopback HTTP from parallel clients to the
// server producing to the real broker, each answered after Kafka's
// acknowledgement. pushes/cpu-s divides the pushes by the CPU time this
// process used (server, HTTP clients and the Kafka client together; the
// broker not), so it understates what the server alone does per core.
func BenchmarkKafka(b *testing.B) {
	env := ingesttest.Setup(b, nil)
	for _, tc := range []struct {
		name string
		push sdkPush
	}{
		{"sdk-cpu-captured", readSDKPush(b, "cpu")},
		{"service-cpu", serviceCPUPush(b)},
	} {
		b.Run(tc.name, func(b *testing.B) { benchKafka(b, env, tc.push) })
	}
}

func benchKafka(b *testing.B, env *ingesttest.Env, push sdkPush) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetBytes(int64(len(push.body)))
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Do(push.request(env.URL))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()) + time.Duration(after.Stime.Nano()-before.Stime.Nano())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pushes/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "pushes/cpu-s")
}
