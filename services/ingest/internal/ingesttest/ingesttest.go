// Package ingesttest runs stackstream-ingest's server against the real
// Kafka broker under a unique topic prefix, and reads back what it wrote.
package ingesttest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// Env is a running server and its topics.
type Env struct {
	URL      string
	GRPCAddr string // OTLP over gRPC
	Topics   record.Topics
	Brokers  []string
	Kafka    *kgo.Client // the server's producer
	Opts     server.Options
}

// Options returns the server options of the tests: the defaults of the
// binary, auth as given.
func Options(topic string, auth *server.Auth) server.Options {
	return server.Options{
		Topic: topic,
		Convert: convert.Options{Limits: record.DefaultLimits(), MaxAge: 168 * time.Hour, MaxClockSkew: 10 * time.Minute,
			MaxRecordBytes: 983040, Now: time.Now},
		Auth: auth, MaxBodyBytes: 16 << 20, MaxConcurrent: 4, QueueWait: time.Second, ProduceTimeout: 10 * time.Second,
	}
}

// Setup creates profiles.raw under a unique prefix (deleted at the end)
// and starts the server; edit changes its options first.
func Setup(t testing.TB, edit func(*server.Options)) *Env {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	e := &Env{Brokers: brokers, Topics: record.TopicsFor(testenv.Name(t, "ingest-") + ".")}
	ctx := context.Background()
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second},
		server.ProducerOpts(64<<20, 10000, 10*time.Second)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(e.Topics, 3, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), e.Topics.All()...) })
	e.Kafka = cl
	e.Opts = Options(e.Topics.ProfilesRaw, nil)
	if edit != nil {
		edit(&e.Opts)
	}
	s := server.NewServer(cl, e.Opts, telemetry.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.GRPC()
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	e.GRPCAddr = ln.Addr().String()
	return e
}

// Attach reads the topics of an existing prefix (a pipeline test's).
func Attach(t testing.TB, brokers []string, topics record.Topics) *Env {
	t.Helper()
	cl, err := kafka.NewClient(context.Background(), kafka.Config{Brokers: brokers, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &Env{Brokers: brokers, Topics: topics, Kafka: cl}
}

// Record is a record read back, decoded.
type Record struct {
	Key     string
	Meta    record.Meta
	Part    string
	Profile *profile.Profile
}

// Read consumes profiles.raw from the start until n records arrived or
// timeout passed, and decodes them as every consumer does.
func (e *Env) Read(t testing.TB, n int, timeout time.Duration) []Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.ConsumeTopics(e.Topics.ProfilesRaw),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			meta, err := record.ParseMeta(r.Headers)
			if err != nil {
				t.Fatalf("record headers: %v", err)
			}
			p, err := record.DecodeProfile(r.Value)
			if err != nil {
				t.Fatalf("record value: %v", err)
			}
			out = append(out, Record{Key: string(r.Key), Meta: meta, Part: record.HeaderValue(r.Headers, record.HeaderPart), Profile: p})
		})
	}
	return out
}

// ReadAll reads every record profiles.raw holds now (up to its end
// offsets), waiting at most timeout.
func (e *Env) ReadAll(t testing.TB, timeout time.Duration) []Record {
	t.Helper()
	ends, err := kadm.NewClient(e.Kafka).ListEndOffsets(context.Background(), e.Topics.ProfilesRaw)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) { n += int(o.Offset) })
	return e.Read(t, n, timeout)
}

// Functions lists the function names of p's samples.
func Functions(p *profile.Profile) map[string]bool {
	out := map[string]bool{}
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function != nil {
					out[ln.Function.Name] = true
				}
			}
		}
	}
	return out
}

// Label is the value of label k on every sample of p, or "" when the
// samples disagree or lack it.
func Label(p *profile.Profile, k string) string {
	v := ""
	for i, s := range p.Sample {
		got := ""
		if len(s.Label[k]) > 0 {
			got = s.Label[k][0]
		}
		if i > 0 && got != v {
			return ""
		}
		v = got
	}
	return v
}
