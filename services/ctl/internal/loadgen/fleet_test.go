package loadgen

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func testFleet(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	c, err := LoadCorpus()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFleet(cfg, c, t0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// run generates intervals of every host and returns the batches in order.
func run(t *testing.T, f *Fleet, intervals int) []*Batch {
	t.Helper()
	var out []*Batch
	hosts := make([]*Host, f.cfg.Hosts)
	for i := range hosts {
		hosts[i] = f.Host(i)
	}
	for i := 1; i <= intervals; i++ {
		for _, h := range hosts {
			b, err := h.Next(t0.Add(h.Phase + time.Duration(i)*f.cfg.Interval))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		flag string
	}{
		{"hosts zero", func(c *Config) { c.Hosts = 0 }, "--hosts=0"},
		{"hosts too many", func(c *Config) { c.Hosts = MaxHosts + 1 }, "--hosts"},
		{"cores", func(c *Config) { c.Cores = 0 }, "--cores"},
		{"rate", func(c *Config) { c.Rate = 5000 }, "--rate"},
		{"interval fraction", func(c *Config) { c.Interval = 1500 * time.Millisecond }, "--interval"},
		{"busy", func(c *Config) { c.Busy = 0 }, "--busy"},
		{"services", func(c *Config) { c.Services = 0 }, "--services"},
		{"replicas", func(c *Config) { c.Replicas = 0 }, "--replicas"},
		{"churn", func(c *Config) { c.Churn = -1 }, "--churn"},
		{"binaries", func(c *Config) { c.BinariesPerHour = -1 }, "--binaries-per-hour"},
		{"label values", func(c *Config) { c.LabelValues = 0 }, "--label-values"},
		{"mutate", func(c *Config) { c.Mutate = 1.5 }, "--mutate"},
		{"duration below interval", func(c *Config) { c.Duration = time.Second }, "--duration"},
		{"speed", func(c *Config) { c.Speed = 0 }, "--speed"},
		{"host prefix", func(c *Config) { c.HostPrefix = "a b" }, "--host-prefix"},
		{"samples per profile", func(c *Config) { c.Cores, c.Rate, c.Interval = 512, 1000, 10*time.Second }, "raw samples per profile"},
		{"deploys", func(c *Config) { c.BinariesPerHour, c.Duration = 100_000, 7*24*time.Hour }, "deploys"},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("Validate() = %v, want ErrInvalid naming %s", err, tt.flag)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts, cfg.Churn, cfg.BinariesPerHour = 3, 30, 3600
	a := run(t, testFleet(t, cfg), 3)
	b := run(t, testFleet(t, cfg), 3)
	for i := range a {
		if !bytes.Equal(a[i].CPU, b[i].CPU) || !bytes.Equal(a[i].Memory, b[i].Memory) {
			t.Fatalf("batch %d (host %s) differs between two runs with seed %d", i, a[i].Host, cfg.Seed)
		}
	}
	cfg.Seed++
	c := run(t, testFleet(t, cfg), 3)
	if bytes.Equal(a[0].CPU, c[0].CPU) {
		t.Fatal("seeds 1 and 2 gave the same first profile")
	}
}

// TestDistinctStacksGrow: more hosts run more services, deploys add
// binaries, and time adds host variations, so distinct stacks grow with
// the fleet and with time, as a real fleet's do.
func TestDistinctStacksGrow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Replicas, cfg.BinariesPerHour = 2, 0
	cfg.Hosts = 2
	small := testFleet(t, cfg)
	run(t, small, 3)
	cfg.Hosts = 20
	large := testFleet(t, cfg)
	run(t, large, 3)
	t.Logf("distinct stacks: 2 hosts %d, 20 hosts %d", small.DistinctStacks(), large.DistinctStacks())
	if s, l := small.DistinctStacks(), large.DistinctStacks(); l < 5*s {
		t.Fatalf("distinct stacks: %d with 2 hosts, %d with 20: want at least 5 times more", s, l)
	}
	longer := testFleet(t, cfg)
	run(t, longer, 6)
	if l, ll := large.DistinctStacks(), longer.DistinctStacks(); ll <= l {
		t.Fatalf("distinct stacks: %d after 3 intervals, %d after 6: want growth", l, ll)
	}
	cfg.BinariesPerHour = 3600 // a deploy every second: each interval has new builds
	deploying := testFleet(t, cfg)
	run(t, deploying, 6)
	if d, l := deploying.DistinctStacks(), longer.DistinctStacks(); d <= l {
		t.Fatalf("distinct stacks: %d with deploys, %d without: want more", d, l)
	}
	if d, l := deploying.Binaries(), longer.Binaries(); d <= l {
		t.Fatalf("binaries: %d with deploys, %d without: want more", d, l)
	}
}

// TestTotals decodes every record under the record contract and checks the
// totals the batch reports, and that every native frame is an address its
// published debuginfo names.
func TestTotals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hosts, cfg.Churn = 4, 12
	f := testFleet(t, cfg)
	topics := record.TopicsFor("t.")
	debug := map[string]*debuginfo.File{}
	var named, total int
	for _, b := range run(t, f, 2) {
		for _, bin := range b.Binaries {
			d, err := debuginfo.Decode(bin.Debuginfo())
			if err != nil || d.BuildID != bin.BuildID {
				t.Fatalf("debuginfo of %s: %v (build ID %q)", bin.BuildID, err, d.BuildID)
			}
			debug[bin.BuildID] = d
		}
		recs := b.Records(topics, "v")
		for _, r := range recs {
			if string(r.Key) != b.Host || r.Topic != topics.ProfilesRaw {
				t.Fatalf("record key %q topic %q", r.Key, r.Topic)
			}
			if _, err := record.ParseMeta(r.Headers); err != nil {
				t.Fatal(err)
			}
		}
		cpu, err := record.DecodeProfile(recs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		var samples, nanos int64
		for _, s := range cpu.Sample {
			samples += s.Value[0]
			nanos += s.Value[1]
			if record.DeriveService(record.Labels(s.Label)) == "" {
				t.Fatalf("sample without service: %v", s.Label)
			}
			for _, loc := range s.Location {
				if loc.Mapping == nil || loc.Mapping.BuildID == "" {
					continue
				}
				total++
				d := debug[loc.Mapping.BuildID]
				if d == nil {
					t.Fatalf("build ID %s named by a profile but not in its batch's binaries", loc.Mapping.BuildID)
				}
				vaddr, ok := d.VaddrOf(loc.Address - loc.Mapping.Start + loc.Mapping.Offset)
				if sym, _, ok2 := d.Symbolize(vaddr); ok && ok2 && sym.Name != "" {
					named++
				}
			}
		}
		if samples != cfg.SamplesPerProfile() || samples != b.Samples || nanos != b.CPUNanos || nanos != samples*cfg.Period() {
			t.Fatalf("host %s: %d samples, %d ns; batch says %d, %d; want %d samples of %d ns", b.Host, samples, nanos, b.Samples, b.CPUNanos, cfg.SamplesPerProfile(), cfg.Period())
		}
		mem, err := record.DecodeProfile(recs[1].Value)
		if err != nil {
			t.Fatal(err)
		}
		var rss int64
		for _, s := range mem.Sample {
			rss += s.Value[0]
		}
		if len(mem.Sample) != cfg.Services || rss != b.RSSBytes {
			t.Fatalf("memory: %d samples, %d bytes; want %d samples, %d bytes", len(mem.Sample), rss, cfg.Services, b.RSSBytes)
		}
	}
	t.Logf("%d native frames, %d binaries", total, len(debug))
	if total == 0 || named != total {
		t.Fatalf("%d of %d native frames named by their debuginfo", named, total)
	}
}

// BenchmarkNext is loadgen's own cost of one 8-core host's 10 s interval at
// 19 Hz (1,520 raw samples): what it takes from the machine it measures.
func BenchmarkNext(b *testing.B) {
	c, err := LoadCorpus()
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Hosts = 100
	f, err := NewFleet(cfg, c, t0)
	if err != nil {
		b.Fatal(err)
	}
	hosts := make([]*Host, cfg.Hosts)
	for i := range hosts {
		hosts[i] = f.Host(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h := hosts[i%len(hosts)]
		if _, err := h.Next(t0.Add(time.Duration(i/len(hosts)+1) * cfg.Interval)); err != nil {
			b.Fatal(err)
		}
	}
}
