package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/heap"
	"github.com/stackstream/stackstream/services/agent/internal/publish"
)

// env is one test's topics on the shared broker.
type env struct {
	brokers []string
	topics  record.Topics
}

func newEnv(t *testing.T) env {
	t.Helper()
	testenv.Root(t)
	brokers := testenv.KafkaBrokers(t)
	topics := record.TopicsFor(testenv.Name(t, "agent-") + ".")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 1, 1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteTopics(ctx, topics.All()...)
		cl.Close()
	})
	return env{brokers: brokers, topics: topics}
}

// running is an agent running in the test.
type running struct {
	*Agent
	pub     *publish.Publisher
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	stopped chan struct{}

	mu      sync.Mutex
	results map[string]int // kind/outcome -> count
	events  []event        // records handed to the producer and answered, in order
}

// event is a record handed to the producer or answered by the broker.
type event struct {
	kind     string
	acked    bool     // false: handed to the producer
	err      error    // of an answer
	key      string   // debuginfo: the build ID
	buildIDs []string // cpu: the build IDs of its mappings
}

// start runs an agent with cfg against e; extra client options (a dialer
// through a proxy) are added to the producer.
func start(t *testing.T, e env, cfg Config, extra ...kgo.Opt) *running {
	t.Helper()
	return startWith(t, e, cfg, Deps{}, extra...)
}

// startWith is start with deps' test fields (noMapFiles) set.
func startWith(t *testing.T, e env, cfg Config, deps Deps, extra ...kgo.Opt) *running {
	t.Helper()
	if cfg.Frequency == 0 {
		cfg.Frequency = 99
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	cfg.CountsMapSize, cfg.StacksMapSize = 16384, 16384
	if cfg.BufferRecords == 0 {
		cfg.BufferRecords = 1000
	}
	cfg.BufferBytes = 64 << 20
	if cfg.DebuginfoHold == 0 {
		cfg.DebuginfoHold = 30 * time.Second
	}
	if cfg.FileTimeout == 0 {
		cfg.FileTimeout = 5 * time.Second
	}
	if cfg.HeapTimeout == 0 {
		d := heap.DefaultLimits
		cfg.HeapMaxCompressedBytes, cfg.HeapMaxBytes, cfg.HeapMaxEntries, cfg.HeapTimeout = d.MaxCompressedBytes, d.MaxBytes, d.MaxEntries, 500*time.Millisecond
	}
	cfg.ProcRoot = "/proc"
	cfg.HostID = "test-host"
	if cfg.Kubernetes == "" {
		cfg.Kubernetes = "off"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	kcfg := kafka.Config{Brokers: e.brokers, TopicPrefix: "", DialTimeout: 10 * time.Second}
	ctx := context.Background()
	cl, err := kafka.NewClient(ctx, kcfg, append(publish.Opts(publish.Config{BufferRecords: cfg.BufferRecords, BufferBytes: cfg.BufferBytes}, e.topics.Debuginfo), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := &running{reg: reg, stopped: make(chan struct{}), results: map[string]int{}}
	r.pub = publish.New(cl, log, publish.NewMetrics(reg), cfg.Hold())
	r.pub.OnProduce = func(kind string, rec *kgo.Record) {
		ev := event{kind: kind, key: string(rec.Key)}
		if kind == string(record.ProfileCPU) {
			if p, err := record.DecodeProfile(rec.Value); err == nil {
				for _, m := range p.Mapping {
					if m.BuildID != "" {
						ev.buildIDs = append(ev.buildIDs, m.BuildID)
					}
				}
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, ev)
	}
	r.pub.OnResult = func(kind string, rec *kgo.Record, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, event{kind: kind, acked: true, err: err, key: string(rec.Key)})
		if err != nil {
			r.results[kind+"/error"]++
		} else {
			r.results[kind+"/ok"]++
		}
	}
	known, err := publish.KnownBuildIDs(ctx, []kgo.Opt{kgo.SeedBrokers(e.brokers...)}, e.topics.Debuginfo)
	if err != nil {
		t.Fatal(err)
	}
	deps.Log, deps.Registry, deps.Publisher, deps.Topics, deps.KnownBuildIDs, deps.Version = log, reg, r.pub, e.topics, known, "test"
	a, err := New(cfg, deps)
	if err != nil {
		cl.Close()
		t.Fatal(err)
	}
	r.Agent = a
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go func() {
		defer close(r.stopped)
		a.Run(runCtx)
	}()
	t.Cleanup(func() {
		r.stop(t)
		cl.Close()
	})
	return r
}

// stop ends the agent and waits until its records are acknowledged.
func (r *running) stop(t *testing.T) {
	r.cancel()
	<-r.stopped
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.pub.Flush(ctx); err != nil {
		t.Errorf("flush: %v", err)
	}
	r.Agent.Close()
}

func (r *running) result(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.results[key]
}

// published is what the agent wrote to the topics.
type published struct {
	cpu, memory, heap, alloc, offcpu []*profile.Profile
	debuginfo                        map[string]*debuginfo.File
}

// consume reads both topics from the start up to their current end.
func consume(t *testing.T, e env) published {
	t.Helper()
	out := published{debuginfo: map[string]*debuginfo.File{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.topics.ProfilesRaw, e.topics.Debuginfo),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, e.topics.ProfilesRaw, e.topics.Debuginfo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume: %v (still waiting for %v)", ctx.Err(), want)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			k := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
			if end, ok := want[k]; ok && rec.Offset+1 >= end {
				delete(want, k)
			}
			if rec.Topic == e.topics.Debuginfo {
				d, err := debuginfo.Decode(rec.Value)
				if err != nil {
					t.Fatalf("debuginfo %s: %v", rec.Key, err)
				}
				if d.BuildID != string(rec.Key) {
					t.Fatalf("debuginfo key %s holds build id %s", rec.Key, d.BuildID)
				}
				out.debuginfo[string(rec.Key)] = d
				return
			}
			meta, err := record.ParseMeta(rec.Headers)
			if err != nil {
				t.Fatalf("record headers: %v", err)
			}
			if string(rec.Key) != "test-host" || meta.Host != "test-host" {
				t.Fatalf("key %q host %q, want test-host", rec.Key, meta.Host)
			}
			p, err := record.DecodeProfile(rec.Value)
			if err != nil {
				t.Fatalf("decode %s profile: %v", meta.Type, err)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatalf("invalid %s profile: %v", meta.Type, err)
			}
			switch meta.Type {
			case record.ProfileCPU:
				out.cpu = append(out.cpu, p)
			case record.ProfileMemory:
				out.memory = append(out.memory, p)
			case record.ProfileHeap:
				out.heap = append(out.heap, p)
			case record.ProfileOffCPU:
				out.offcpu = append(out.offcpu, p)
			case record.ProfileAlloc:
				out.alloc = append(out.alloc, p)
			}
		})
	}
	return out
}

// pidSamples returns the samples labelled with pid.
func pidSamples(ps []*profile.Profile, pid int) []*profile.Sample {
	var out []*profile.Sample
	want := fmt.Sprint(pid)
	for _, p := range ps {
		for _, s := range p.Sample {
			if len(s.Label[record.LabelPID]) == 1 && s.Label[record.LabelPID][0] == want {
				out = append(out, s)
			}
		}
	}
	return out
}

func pids(ps []*profile.Profile) map[string]bool {
	out := map[string]bool{}
	for _, p := range ps {
		for _, s := range p.Sample {
			for _, v := range s.Label[record.LabelPID] {
				out[v] = true
			}
		}
	}
	return out
}

// leafFunction resolves the innermost user frame of s through the published
// debuginfo, as the symbolizer does.
func leafFunction(s *profile.Sample, di map[string]*debuginfo.File) string {
	for _, loc := range s.Location {
		m := loc.Mapping
		if m == nil || m.File == kernelMappingFile {
			continue
		}
		d := di[m.BuildID]
		if d == nil {
			return "<no debuginfo>"
		}
		vaddr, ok := d.VaddrOf(loc.Address - m.Start + m.Offset)
		if !ok {
			return "<outside segments>"
		}
		sym, _, ok := d.Symbolize(vaddr)
		if !ok {
			return "<unknown>"
		}
		return sym.Name
	}
	return "<kernel only>"
}

// leafMapping returns the mapping of the innermost user frame of s.
func leafMapping(s *profile.Sample) *profile.Mapping {
	for _, loc := range s.Location {
		if loc.Mapping != nil && loc.Mapping.File != kernelMappingFile {
			return loc.Mapping
		}
	}
	return nil
}
