// Command stackstream-ingest takes profiles pushed by Pyroscope clients
// (/ingest and the push API) and OTLP exporters (gRPC and HTTP) and writes them to profiles.raw as records of
// the Kafka contract, keyed by host. It keeps no state. See docs/INGEST.md.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

func main() {
	config.Exit("stackstream-ingest", runMain())
}

func runMain() error {
	var cfg Config
	log, reg, err := service.Start("ingest", &cfg, os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	in := cfg.Ingest
	tokens, err := in.ReadTokens() // checked by Validate
	if err != nil {
		return err
	}
	byToken := make(map[string]string, len(tokens))
	for _, t := range tokens {
		byToken[t.Token] = t.Tenant
	}
	cl, err := kafka.NewClient(ctx, cfg.Kafka, append(server.ProducerOpts(int(in.BufferBytes), in.BufferRecords, in.ProduceTimeout), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	// Closed last: Close flushes nothing, so the server stops first and every
	// request it answered has had its acknowledgement.
	defer cl.Close()

	maxConcurrent := in.MaxConcurrent
	if maxConcurrent == 0 {
		maxConcurrent = max(2, runtime.GOMAXPROCS(0))
	}
	ingest := server.NewServer(cl, server.Options{
		Topic: cfg.Kafka.Topics().ProfilesRaw,
		Convert: convert.Options{
			Limits: record.DefaultLimits(), MaxAge: in.MaxAge, MaxClockSkew: in.MaxClockSkew,
			MaxRecordBytes: in.MaxRecordBytes, Now: time.Now,
		},
		Auth:              server.NewAuth(byToken, in.BasicAuthUser, in.BasicAuthPass),
		MaxBodyBytes:      in.MaxBodyBytes,
		MaxConcurrent:     maxConcurrent,
		MaxReadBytes:      in.MaxReadBytes,
		QueueWait:         in.QueueWait,
		ProduceTimeout:    in.ProduceTimeout,
		TrustForwardedFor: in.TrustForwardedFor,
		Ready:             func(ctx context.Context) error { return kafka.Ping(ctx, cl, cfg.Kafka) },
	}, reg, log)
	srv, err := telemetry.ListenServer(in.ListenAddr, server.HTTPServer(ingest.Handler(), in.ProduceTimeout))
	if err != nil {
		return err
	}

	g := service.NewGroup(log)
	// The servers are the only components: a signal stops them, and each
	// Stop waits for the requests in flight, which wait for their
	// acknowledgements.
	g.Add(srv.Run, srv.Stop)
	otlpHTTPAddr, otlpGRPCAddr := "off", "off"
	if in.OTLPHTTPAddr != "off" {
		otlpHTTP, err := telemetry.ListenServer(in.OTLPHTTPAddr, server.HTTPServer(ingest.Handler(), in.ProduceTimeout))
		if err != nil {
			return err
		}
		otlpHTTPAddr = otlpHTTP.Addr()
		g.Add(otlpHTTP.Run, otlpHTTP.Stop)
	}
	if in.OTLPGRPCAddr != "off" {
		ln, err := net.Listen("tcp", in.OTLPGRPCAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", in.OTLPGRPCAddr, err)
		}
		otlpGRPCAddr = ln.Addr().String()
		grpcSrv := ingest.GRPC()
		g.Add(func() error { return grpcSrv.Serve(ln) }, func(error) { server.StopGRPC(grpcSrv, in.ProduceTimeout+5*time.Second) })
	}
	log.Info("started", "listen", srv.Addr(), "otlp_grpc", otlpGRPCAddr, "otlp_http", otlpHTTPAddr, "topic", cfg.Kafka.Topics().ProfilesRaw,
		"auth", len(tokens) > 0 || in.BasicAuthUser != "", "tokens", len(tokens), "max_concurrent", maxConcurrent)
	return g.Run()
}
