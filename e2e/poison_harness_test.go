package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producedRecord is a record the test produced, with the case and path it
// belongs to.
type producedRecord struct {
	c    *poisonCase
	path path
	host string
	rec  *kgo.Record // with the partition and offset it got
}

// service is one running binary.
type service struct {
	base string
	cmd  *exec.Cmd
	log  string
	// peak is the highest VmHWM seen while it ran: a process that exits
	// takes its own with it.
	peak atomic.Int64
}

// watchRSS samples every service's VmHWM until ctx ends.
func watchRSS(ctx context.Context, svcs map[string]*service) {
	for {
		for _, s := range svcs {
			if v, ok := s.peakRSS(); ok && v > s.peak.Load() {
				s.peak.Store(v)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startLogged runs bin like start does, but into a log file: a panic's
// first lines (the panicking goroutine) are what name the cause, and a
// 4,000-byte tail of a goroutine dump does not show them.
func startLogged(t *testing.T, bin, logDir string, env []string) *service {
	t.Helper()
	s := &service{base: filepath.Base(bin), log: filepath.Join(logDir, filepath.Base(bin)+".log")}
	f, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Logf("%s pid %d", s.base, s.cmd.Process.Pid)
	t.Cleanup(func() {
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			t.Logf("---- %s (%s) ----\n%s", s.base, s.log, s.excerpt())
		}
	})
	return s
}

// excerpt is the start of a panic, or the log's tail.
func (s *service) excerpt() string {
	b, _ := os.ReadFile(s.log)
	out := string(b)
	if i := strings.Index(out, "panic: "); i >= 0 {
		out = out[i:]
		if len(out) > 3000 {
			out = out[:3000] + "..."
		}
		return out
	}
	return tail(out, 3000)
}

// state is "" while the process runs, else what became of it. The test
// never waits for it before cleanup, so an exited one is a zombie.
func (s *service) state() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return "gone"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return "exited (" + v + ")"
			}
			return ""
		}
	}
	return "no State in /proc status"
}

// peakRSS is VmHWM in bytes.
func (s *service) peakRSS() (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// consumer is a service with the group and topic whose lag says whether it
// has handled everything.
type consumer struct {
	svc    *service
	group  string
	topic  string
	rollup bool
	// broken says in which case the consumer exited or stalled; later cases
	// do not wait for it (each would only time out again).
	broken string
}

type kafkaView struct {
	brokers []string
	adm     *kadm.Client
}

var rollupCheckpoint = regexp.MustCompile(`next=(-?\d+)`)

// lag is the number of records of c's topic that c has not handled: from
// its committed offset (for the rollup, the next= of its checkpoint when
// further) to the end readable with read_committed, not counting the
// transaction markers the symbolizer's commits leave (a consumer commits
// the offset after its last record; the marker after it is no record).
func (k *kafkaView) lag(ctx context.Context, c *consumer) (int64, error) {
	ends, err := k.adm.ListCommittedOffsets(ctx, c.topic)
	if err != nil {
		return -1, fmt.Errorf("list end offsets of %s: %w", c.topic, err)
	}
	offs, err := k.adm.FetchOffsetsForTopics(ctx, c.group, c.topic)
	if err != nil {
		return -1, fmt.Errorf("fetch offsets of group %s: %w", c.group, err)
	}
	gaps := map[int32][2]int64{}
	var ferr error
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			ferr = lo.Err
			return
		}
		start := int64(0)
		if o, ok := offs.Lookup(c.topic, lo.Partition); ok && o.Err == nil && o.At >= 0 {
			start = o.At
			if m := rollupCheckpoint.FindStringSubmatch(o.Metadata); c.rollup && m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				start = max(start, n)
			}
		}
		if start < lo.Offset {
			gaps[lo.Partition] = [2]int64{start, lo.Offset}
		}
	})
	if ferr != nil {
		return -1, ferr
	}
	if len(gaps) == 0 {
		return 0, nil
	}
	return k.countRecords(ctx, c.topic, gaps)
}

// countRecords counts the data records in [start, end) of each partition.
func (k *kafkaView) countRecords(ctx context.Context, topic string, gaps map[int32][2]int64) (int64, error) {
	at := map[int32]kgo.Offset{}
	for p, g := range gaps {
		at[p] = kgo.NewOffset().At(g[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(1<<20))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	left := len(gaps)
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			// Not read to the end: count the rest as lag.
			var rest int64
			for p, g := range gaps {
				if !done[p] {
					rest += g[1] - g[0]
				}
			}
			return n + rest, nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			g := gaps[r.Partition]
			if done[r.Partition] || r.Offset >= g[1] {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset >= g[1]-1 {
				done[r.Partition] = true
				left--
			}
		})
	}
	return n, nil
}

// drain waits until every consumer has handled everything produced so far,
// in pipeline order (the symbolizer's output is committed with its offsets,
// so once its lag is zero, its output counts in the others' lag), and logs
// how long each took. A consumer that exits or does not finish in time is
// broken from then on.
func drain(ctx context.Context, t *testing.T, k *kafkaView, consumers []*consumer, c *poisonCase) {
	t.Helper()
	for _, cn := range consumers {
		if cn.broken != "" {
			t.Errorf("not checked by %s, broken earlier: %s", cn.svc.base, cn.broken)
		}
	}
	start := time.Now()
	deadline, lastLog := start.Add(c.drain), start
	took := map[*consumer]time.Duration{}
	for {
		pending := ""
		upstream := true // the symbolizer (first) is done or broken
		for i, cn := range consumers {
			if cn.broken != "" {
				continue
			}
			if st := cn.svc.state(); st != "" {
				cn.broken = fmt.Sprintf("%s in case %s", st, c.name)
				t.Errorf("%s %s:\n%s", cn.svc.base, cn.broken, cn.svc.excerpt())
				continue
			}
			if _, ok := took[cn]; ok {
				continue
			}
			lag, err := k.lag(ctx, cn)
			switch {
			case err != nil || lag != 0:
				if pending == "" {
					pending = fmt.Sprintf("%s: lag %d on %s (%v)", cn.svc.base, lag, cn.topic, err)
				}
			case upstream:
				took[cn] = time.Since(start)
			}
			if i == 0 {
				_, upstream = took[cn]
			}
		}
		if pending == "" && len(took) == len(consumers)-brokenCount(consumers) {
			var parts []string
			for _, cn := range consumers {
				if d, ok := took[cn]; ok {
					parts = append(parts, fmt.Sprintf("%s %.1fs", strings.TrimPrefix(cn.svc.base, "stackstream-"), d.Seconds()))
				}
			}
			t.Logf("handled by %s", strings.Join(parts, ", "))
			return
		}
		if time.Since(lastLog) >= 10*time.Second {
			t.Logf("after %.0fs waiting for %s", time.Since(start).Seconds(), pending)
			lastLog = time.Now()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, cn := range consumers {
				if cn.broken == "" && strings.HasPrefix(pending, cn.svc.base+":") {
					cn.broken = fmt.Sprintf("stalled in case %s (%s after %s)", c.name, pending, c.drain)
					t.Errorf("%s %s; log tail:\n%s", cn.svc.base, cn.broken, tail(readFile(cn.svc.log), 2000))
				}
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func brokenCount(consumers []*consumer) int {
	n := 0
	for _, cn := range consumers {
		if cn.broken != "" {
			n++
		}
	}
	return n
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// readAll reads topic from the start to its read-committed end.
func readAll(ctx context.Context, t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(mustClient(t, brokers))
	defer adm.Close()
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Offset > 0 {
			want[lo.Partition] = lo.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl := mustClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxBytes(64<<20))
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("read %s: not at the end after 30s (left: %v)", topic, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func mustClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// slowDebuginfod answers every lookup 404 after a delay, as a remote
// debuginfod server that does not know a build ID does, and counts the
// lookups and how many were in flight at once.
type slowDebuginfod struct {
	url         string
	n, cur, max atomic.Int64
}

func newSlowDebuginfod(t *testing.T, delay time.Duration) *slowDebuginfod {
	d := &slowDebuginfod{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.n.Add(1)
		c := d.cur.Add(1)
		mu.Lock()
		if c > d.max.Load() {
			d.max.Store(c)
		}
		mu.Unlock()
		defer d.cur.Add(-1)
		time.Sleep(delay)
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d.url = "http://" + ln.Addr().String()
	return d
}

func (d *slowDebuginfod) stats() (n, peak int64) { return d.n.Load(), d.max.Load() }

// buildPoisonBinaries builds the services this suite runs (not the agent:
// it needs none, and another helper's half-done agent change must not fail it).
func buildPoisonBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// One go build: the five link in parallel.
	args := []string{"build", "-o", dir + string(filepath.Separator),
		"../services/symbolizer/cmd/stackstream-symbolizer",
		"../services/indexer/cmd/stackstream-indexer",
		"../services/rollup/cmd/stackstream-rollup",
		"../services/query/cmd/stackstream-query",
		"../services/ctl/cmd/stackctl",
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}
