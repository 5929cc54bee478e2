// Command stackstream-ingest takes profiles pushed by Pyroscope clients
// (/ingest and the push API) and writes them to profiles.raw as records of
// the Kafka contract, keyed by host. It keeps no state. See docs/INGEST.md.
package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/schemas/record"
	ingestconfig "github.com/stackstream/stackstream/services/ingest/internal/config"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

func main() {
	config.Exit("stackstream-ingest", runMain())
}

func runMain() error {
	var cfg ingestconfig.Config
	if err := config.Load(&cfg, os.Args[1:], os.Stdout); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(cfg.Log, os.Stderr, "ingest")
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
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
	cl, err := kafka.NewClient(ctx, cfg.Kafka, append(ProducerOpts(in), kafka.LogTo(log))...)
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
	handler := server.New(cl, server.Options{
		Topic: cfg.Kafka.Topics().ProfilesRaw,
		Convert: convert.Options{
			Limits: record.DefaultLimits(), MaxAge: in.MaxAge, MaxClockSkew: in.MaxClockSkew,
			MaxRecordBytes: in.MaxRecordBytes, Now: time.Now,
		},
		Auth:              server.NewAuth(byToken, in.BasicAuthUser, in.BasicAuthPass),
		MaxBodyBytes:      in.MaxBodyBytes,
		MaxConcurrent:     maxConcurrent,
		QueueWait:         in.QueueWait,
		ProduceTimeout:    in.ProduceTimeout,
		TrustForwardedFor: in.TrustForwardedFor,
		Ready:             func(ctx context.Context) error { return kafka.Ping(ctx, cl, cfg.Kafka) },
	}, reg, log)
	srv, err := telemetry.ListenServer(in.ListenAddr, HTTPServer(handler, in.ProduceTimeout))
	if err != nil {
		return err
	}

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	// The server is the only component: a signal stops it, and Stop waits
	// for the requests in flight, which wait for their acknowledgements.
	g.Add(srv.Run, srv.Stop)
	log.Info("started", "listen", srv.Addr(), "topic", cfg.Kafka.Topics().ProfilesRaw,
		"auth", len(tokens) > 0 || in.BasicAuthUser != "", "tokens", len(tokens), "max_concurrent", maxConcurrent)
	err = g.Run()
	var sig *run.SignalError
	if errors.As(err, &sig) {
		log.Info("stopped", "signal", sig.Signal)
		return nil
	}
	return err
}

// ProducerOpts bound the producer: the buffer of records waiting for Kafka
// (beyond it requests get 429) and how long a record may wait (then its
// request gets 503).
func ProducerOpts(in ingestconfig.Ingest) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedBytes(int(in.BufferBytes)),
		kgo.MaxBufferedRecords(in.BufferRecords),
		kgo.RecordDeliveryTimeout(in.ProduceTimeout),
		// Values are gzip already.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// Pushes arrive one by one: a short linger batches concurrent ones.
		kgo.ProducerLinger(2 * time.Millisecond),
	}
}

// HTTPServer has the time-outs of a server facing clients: headers within
// 10 s, a body (up to 16 MiB over a slow link) within 60 s, the answer
// within the produce time-out plus 30 s.
func HTTPServer(h http.Handler, produceTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60*time.Second + produceTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
