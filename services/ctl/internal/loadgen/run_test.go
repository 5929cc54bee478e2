package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestRunKafka publishes a small fleet to the real broker at catch-up speed
// and reads back everything it produced: every profile record passes the
// record contract (headers, gzip pprof within the consumers' limits), is
// keyed by its host, the CPU totals are the summary's, and every build ID a
// profile names has its debuginfo on the topic, whose value decodes to
// that build ID.
func TestRunKafka(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kcfg := kafka.Config{Brokers: brokers, TopicPrefix: testenv.Name(t, "loadgen") + ".", DialTimeout: 10 * time.Second}
	cl, err := kafka.NewClient(ctx, kcfg, kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := kcfg.Topics()
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 3, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topics.All()...) })

	cfg := DefaultConfig()
	cfg.Hosts, cfg.Duration, cfg.Speed, cfg.BinariesPerHour, cfg.Churn = 6, time.Minute, 20, 120, 6
	c, err := LoadCorpus()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sum, err := Run(ctx, cfg, c, cl, topics, time.Now, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(cfg.Hosts) * int64(cfg.Duration/cfg.Interval); sum.Profiles != want || sum.Records != 2*want {
		t.Fatalf("summary: %d profiles, %d records; want %d and %d", sum.Profiles, sum.Records, want, 2*want)
	}
	if !strings.Contains(out.String(), "cpu_nanoseconds_total=") {
		t.Fatalf("no summary line in %q", out.String())
	}

	profiles := readAll(t, ctx, brokers, topics.ProfilesRaw, int(sum.Records))
	named := map[string]bool{}
	var cpuNanos int64
	hosts := map[string]bool{}
	for _, r := range profiles {
		meta, err := record.ParseMeta(r.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if meta.Host != string(r.Key) || !strings.HasPrefix(meta.Host, cfg.HostPrefix) {
			t.Fatalf("record key %q, host header %q", r.Key, meta.Host)
		}
		hosts[meta.Host] = true
		p, err := record.DecodeProfile(r.Value)
		if err != nil {
			t.Fatalf("%s record of %s: %v", meta.Type, meta.Host, err)
		}
		if meta.Type != record.ProfileCPU {
			continue
		}
		for _, s := range p.Sample {
			cpuNanos += s.Value[1]
		}
		for _, m := range p.Mapping {
			if m.BuildID != "" {
				named[m.BuildID] = true
			}
		}
	}
	if cpuNanos != sum.CPUNanos || len(hosts) != cfg.Hosts {
		t.Fatalf("read back %d ns of CPU from %d hosts; summary %d ns, %d hosts", cpuNanos, len(hosts), sum.CPUNanos, cfg.Hosts)
	}
	published := map[string]bool{}
	for _, r := range readAll(t, ctx, brokers, topics.Debuginfo, int(sum.Debuginfo)) {
		d, err := debuginfo.Decode(r.Value)
		if err != nil || d.BuildID != string(r.Key) || len(d.Symbols) == 0 {
			t.Fatalf("debuginfo record %q: %v", r.Key, err)
		}
		published[d.BuildID] = true
	}
	for id := range named {
		if !published[id] {
			t.Fatalf("build ID %s named by a profile has no debuginfo on %s", id, topics.Debuginfo)
		}
	}
	if len(published) != len(named) {
		t.Fatalf("%d build IDs published, %d named by profiles", len(published), len(named))
	}
}

// readAll reads n records of topic from the start.
func readAll(t *testing.T, ctx context.Context, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, len(out), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("read %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	if len(out) != n {
		t.Fatalf("read %s: %d records, want %d", topic, len(out), n)
	}
	return out
}
