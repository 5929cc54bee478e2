package server_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// otlpServiceCPU is testdata/sdk/service-cpu.pprof (774 stacks of a busy
// Go service) as the eBPF profiler would send it: native frames with
// addresses and build IDs, sample counts at 20 Hz.
func otlpServiceCPU(b *testing.B) pprofile.Profiles {
	f, err := os.Open("../../testdata/sdk/service-cpu.pprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		b.Fatal(err)
	}
	return ingesttest.OTLPFromPprof(p, time.Now())
}

// BenchmarkOTLP: one OTLP request through the server, records
// acknowledged at once; 1e9/ns-per-op is the requests per second of one
// core. http: the handler in process (protobuf body); grpc: a real gRPC
// client over loopback, client and server in this process (so the client's
// cost is counted too).
func BenchmarkOTLP(b *testing.B) {
	for _, tc := range []struct {
		name string
		pd   pprofile.Profiles
	}{
		{"ebpf-mixed", ingesttest.EBPFProfilerRequest(time.Now())},
		{"service-cpu", otlpServiceCPU(b)},
	} {
		body, err := pprofileotlp.NewExportRequestFromProfiles(tc.pd).MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		s := server.NewServer(ackAll{}, ingesttest.Options("bench.profiles.raw", nil), prometheusRegistry(), discard())
		b.Run("http/"+tc.name, func(b *testing.B) {
			h := s.Handler()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r, _ := http.NewRequest(http.MethodPost, "http://x"+server.OTLPPath, bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/x-protobuf")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s/core")
		})
		b.Run("grpc/"+tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			g := s.GRPC()
			go g.Serve(ln)
			defer g.Stop()
			cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			client := pprofileotlp.NewGRPCClient(cc)
			req := pprofileotlp.NewExportRequestFromProfiles(tc.pd)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Export(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s/core")
		})
	}
}

// BenchmarkOTLPKafka: OTLP requests over loopback gRPC from parallel
// clients to the server producing to the real broker, each answered after
// Kafka's acknowledgement; requests/cpu-s divides by this process's CPU
// time (server, clients, Kafka client; not the broker).
func BenchmarkOTLPKafka(b *testing.B) {
	env := ingesttest.Setup(b, nil)
	for _, tc := range []struct {
		name string
		pd   pprofile.Profiles
	}{
		{"ebpf-mixed", ingesttest.EBPFProfilerRequest(time.Now())},
		{"service-cpu", otlpServiceCPU(b)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cc, err := grpc.NewClient(env.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			client := pprofileotlp.NewGRPCClient(cc)
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := pprofileotlp.NewExportRequest()
				pprofileotlp.NewExportRequestFromProfiles(tc.pd).Profiles().CopyTo(req.Profiles())
				for pb.Next() {
					if _, err := client.Export(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()) + time.Duration(after.Stime.Nano()-before.Stime.Nano())
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(float64(b.N)/cpu.Seconds(), "requests/cpu-s")
		})
	}
}
