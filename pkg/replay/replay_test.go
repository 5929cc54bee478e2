package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
)

// fixture is a 2-partition topic holding 10 old and 10 new records per
// partition, and a group that has consumed all of them.
type fixture struct {
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
	topic   string
	group   string
	split   time.Time // the new records' timestamp
}

func setup(t *testing.T) *fixture {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &fixture{brokers: brokers, cl: cl, adm: kadm.NewClient(cl), topic: testenv.Name(t, "replay-"), group: testenv.Name(t, "grp-")}
	ctx := context.Background()
	if _, err := f.adm.CreateTopic(ctx, 2, 1, nil, f.topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.adm.DeleteTopics(context.Background(), f.topic) })
	old := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	f.split = old.Add(time.Hour)
	var recs []*kgo.Record
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 20; i++ {
			ts := old.Add(time.Duration(i) * time.Minute)
			if i >= 10 {
				ts = f.split.Add(time.Duration(i) * time.Minute)
			}
			recs = append(recs, &kgo.Record{Topic: f.topic, Partition: p, Value: []byte(fmt.Sprint(p, "-", i)), Timestamp: ts})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	n := f.consume(t, 40, nil)
	if n != 40 {
		t.Fatalf("fixture consumed %d, want 40", n)
	}
	return f
}

// consume runs a group member until it has read want records (or stop is
// closed), committing as it goes, then leaves the group.
func (f *fixture) consume(t *testing.T, want int, stop <-chan struct{}) int {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ConsumerGroup(f.group), kgo.ConsumeTopics(f.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	deadline := time.Now().Add(60 * time.Second)
	for n < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := c.PollFetches(ctx)
		cancel()
		n += fs.NumRecords()
		if err := c.CommitUncommittedOffsets(context.Background()); err != nil {
			t.Errorf("commit: %v", err)
		}
		select {
		case <-stop:
			return n
		default:
		}
	}
	return n
}

func TestReset(t *testing.T) {
	f := setup(t)
	var out bytes.Buffer
	sum, err := Run(context.Background(), f.cl, f.adm, Options{Group: f.group, Topic: f.topic, From: f.split}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	if len(sum.Partitions) != 2 || sum.Records != 20 {
		t.Fatalf("summary %+v", sum)
	}
	for _, p := range sum.Partitions {
		if p.Old != 20 || p.New != 10 || p.End != 20 {
			t.Fatalf("partition %+v, want 20 -> 10 (end 20)", p)
		}
		if !strings.Contains(out.String(), fmt.Sprintf("partition %d: 20 -> 10", p.Partition)) {
			t.Fatalf("progress lacks partition %d:\n%s", p.Partition, out.String())
		}
	}
	committed, err := f.adm.FetchOffsets(context.Background(), f.group)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if o, ok := committed.Lookup(f.topic, p); !ok || o.At != 10 {
			t.Fatalf("partition %d committed %+v, want 10", p, o)
		}
	}
	// The group's next consumer reads exactly the new records again.
	if n := f.consume(t, 20, nil); n != 20 {
		t.Fatalf("after reset, consumed %d records, want 20", n)
	}

	// From before everything: back to the start; from the future: the end.
	sum, err = Run(context.Background(), f.cl, f.adm, Options{Group: f.group, Topic: f.topic, From: f.split.Add(-24 * time.Hour)}, &out)
	if err != nil || sum.Records != 40 {
		t.Fatalf("from the past: %+v %v", sum, err)
	}
	sum, err = Run(context.Background(), f.cl, f.adm, Options{Group: f.group, Topic: f.topic, From: time.Now().Add(time.Hour)}, &out)
	if err != nil || sum.Records != 0 {
		t.Fatalf("from the future: %+v %v", sum, err)
	}
}

func TestRefusesActiveGroup(t *testing.T) {
	f := setup(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.consume(t, 1<<30, stop) }()
	defer func() { close(stop); wg.Wait() }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := Run(context.Background(), f.cl, f.adm, Options{Group: f.group, Topic: f.topic, From: f.split}, &bytes.Buffer{})
		if errors.Is(err, ErrGroupActive) {
			if !strings.Contains(err.Error(), "stop the group's consumers first") {
				t.Fatalf("error does not say what to do: %v", err)
			}
			t.Logf("refused: %v", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay with a live member: got %v, want ErrGroupActive", err)
		}
		time.Sleep(500 * time.Millisecond) // the member is still joining
	}
	committed, _ := f.adm.FetchOffsets(context.Background(), f.group)
	if o, _ := committed.Lookup(f.topic, 0); o.At != 20 {
		t.Fatalf("refused replay moved offsets: %+v", o)
	}
}

func TestBadInput(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no group", Options{Topic: f.topic, From: f.split}, "--group"},
		{"no topic", Options{Group: f.group, From: f.split}, "--topic"},
		{"no time", Options{Group: f.group, Topic: f.topic}, "--from"},
		{"missing topic", Options{Group: f.group, Topic: f.topic + "-nope", From: f.split}, "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(ctx, f.cl, f.adm, tc.opts, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// syncWriter signals the first write that reports the commit.
type syncWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	committed chan struct{}
	once      sync.Once
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.HasPrefix(p, []byte("committed:")) {
		w.once.Do(func() { close(w.committed) })
	}
	return w.buf.Write(p)
}

func TestFollow(t *testing.T) {
	f := setup(t)
	w := &syncWriter{committed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var consumed int
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-w.committed:
			consumed = f.consume(t, 20, nil)
		case <-ctx.Done():
		}
	}()
	sum, err := Run(ctx, f.cl, f.adm, Options{Group: f.group, Topic: f.topic, From: f.split, Follow: true, Interval: 200 * time.Millisecond}, w)
	<-done
	w.mu.Lock()
	out := w.buf.String()
	w.mu.Unlock()
	t.Logf("\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if consumed != 20 || sum.Remaining != 0 || !strings.Contains(out, "caught up: 20 records replayed") {
		t.Fatalf("consumed %d, summary %+v", consumed, sum)
	}
}

func TestRateETA(t *testing.T) {
	for _, c := range []struct {
		done, left int64
		elapsed    time.Duration
		want       string
	}{
		{0, 100, time.Second, ""},
		{50, 100, 10 * time.Second, ", 5 records/s, ETA 20s"},
		{1000, 0, 4 * time.Second, ", 250 records/s"},
	} {
		if got := rateETA(c.done, c.left, c.elapsed); got != c.want {
			t.Errorf("rateETA(%d, %d, %s) = %q, want %q", c.done, c.left, c.elapsed, got, c.want)
		}
	}
}

// warnWriter signals the first write of the --force warning.
type warnWriter struct {
	syncWriter
	warned chan struct{}
	wonce  sync.Once
}

func (w *warnWriter) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("WARNING: --force")) {
		w.wonce.Do(func() { close(w.warned) })
	}
	return w.syncWriter.Write(p)
}

// TestForce: with a live member, replay refuses; with Force it warns, waits
// for the member to leave, and commits the reset then. A member that stays
// makes Force give up after ForceWait, leaving the offsets alone.
func TestForce(t *testing.T) {
	f := setup(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.consume(t, 1<<30, stop) }()
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
	}()
	ctx := context.Background()
	opts := Options{Group: f.group, Topic: f.topic, From: f.split}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := Run(ctx, f.cl, f.adm, opts, &bytes.Buffer{})
		if errors.Is(err, ErrGroupActive) {
			if !strings.Contains(err.Error(), "--force") {
				t.Fatalf("the refusal does not mention --force: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay with a live member: got %v, want ErrGroupActive", err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The member stays: Force gives up.
	opts.Force, opts.ForceWait = true, 2*time.Second
	var out bytes.Buffer
	_, err := Run(ctx, f.cl, f.adm, opts, &out)
	if !errors.Is(err, ErrGroupActive) || !strings.Contains(err.Error(), "gave up after 2s") || !strings.Contains(out.String(), "WARNING: --force") {
		t.Fatalf("force with a member that stays: %v\n%s", err, out.String())
	}
	committed, _ := f.adm.FetchOffsets(ctx, f.group)
	if o, _ := committed.Lookup(f.topic, 0); o.At != 20 {
		t.Fatalf("a replay that gave up moved offsets: %+v", o)
	}

	// The member leaves while Force waits: the reset lands.
	opts.ForceWait = time.Minute
	w := &warnWriter{syncWriter: syncWriter{committed: make(chan struct{})}, warned: make(chan struct{})}
	go func() {
		<-w.warned
		close(stop)
		wg.Wait()
	}()
	stopped = true
	sum, err := Run(ctx, f.cl, f.adm, opts, w)
	w.mu.Lock()
	t.Logf("\n%s", w.buf.String())
	w.mu.Unlock()
	if err != nil || sum.Records != 20 {
		t.Fatalf("force once the member left: %+v, %v", sum, err)
	}
	committed, _ = f.adm.FetchOffsets(ctx, f.group)
	for p := int32(0); p < 2; p++ {
		if o, ok := committed.Lookup(f.topic, p); !ok || o.At != 10 {
			t.Fatalf("partition %d committed %+v, want 10", p, o)
		}
	}
}

// TestPositions: a rollup's commit trails what it handled, and says how
// far it got after "next=" in its metadata, with or without fields after
// it (a snapshot's " snap=…").
func TestPositions(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: f.topic, Partition: 0, At: 3, LeaderEpoch: -1, Metadata: "rollup/v1 wm=5 floor=9 next=12"})
	os.Add(kadm.Offset{Topic: f.topic, Partition: 1, At: 4, LeaderEpoch: -1, Metadata: "rollup/v1 wm=5 floor=9 next=17 snap=0+3@17"})
	if _, err := f.adm.CommitOffsets(ctx, f.group, os); err != nil {
		t.Fatal(err)
	}
	got, err := Positions(ctx, f.adm, f.group, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 12 || got[1] != 17 {
		t.Fatalf("positions %v, want 0:12 1:17", got)
	}
}

// TestPartitionLag: the one rule stackctl status and Progress count a
// group's lag by.
func TestPartitionLag(t *testing.T) {
	for _, c := range []struct {
		name              string
		at                int64
		metadata          string
		start, end        int64
		wantLag, wantFrom int64
	}{
		{"committed", 40, "", 10, 100, 60, 40},
		{"rollup next= further than its commit", 40, "rollup/v1 wm=5 floor=9 next=90 snap=0+3@90", 10, 100, 10, 90},
		{"next= behind the commit", 40, "rollup/v1 next=30", 10, 100, 60, 40},
		{"no commit: from the start", -1, "", 10, 100, 90, 10},
		{"commit past an end listed before it", 120, "", 10, 100, 0, 120},
	} {
		t.Run(c.name, func(t *testing.T) {
			lag, from := PartitionLag(c.at, c.metadata, c.start, c.end)
			if lag != c.wantLag || from != c.wantFrom {
				t.Fatalf("PartitionLag(%d, %q, %d, %d) = %d, %d; want %d, %d", c.at, c.metadata, c.start, c.end, lag, from, c.wantLag, c.wantFrom)
			}
		})
	}
}

// TestFollowLive: a group following a live one is caught up once it has no
// more left than the live group, not when it reaches the end.
func TestFollowLive(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	temp := f.group + "-temp"
	commit := func(group string, at int64) {
		t.Helper()
		var os kadm.Offsets
		for p := int32(0); p < 2; p++ {
			os.Add(kadm.Offset{Topic: f.topic, Partition: p, At: at, LeaderEpoch: -1})
		}
		if _, err := f.adm.CommitOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
	}
	commit(f.group, 15) // the live group: 5 left per partition
	commit(temp, 5)     // 15 left per partition
	w := &syncWriter{committed: make(chan struct{})}
	type result struct {
		d   Drained
		err error
	}
	res := make(chan result, 1)
	go func() {
		d, err := Progress{Adm: f.adm, Topic: f.topic, Groups: []string{temp}, Live: map[string]string{temp: f.group}, Interval: 100 * time.Millisecond, Out: w}.Follow(ctx, 0)
		res <- result{d, err}
	}()
	select {
	case r := <-res:
		t.Fatalf("returned with the temporary group 20 records behind its live group: %+v, %v", r.d, r.err)
	case <-time.After(time.Second):
	}
	commit(temp, 16) // one past the live group
	r := <-res
	w.mu.Lock()
	t.Logf("\n%s", w.buf.String())
	w.mu.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.d.Left != 0 || r.d.Processed != 22 {
		t.Fatalf("drained %+v, want 0 left and 22 processed", r.d)
	}
}
