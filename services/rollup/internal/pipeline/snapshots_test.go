package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// TestSnapshotsHandOver: an instance stopped in the middle of an hour
// (whose window holds the commit at the hour's first record) hands its
// partitions over through their snapshots, and the next reads only the
// records produced since; one that dies (its final write cannot reach
// OpenSearch, so nothing more is stored, snapshotted or committed) is
// followed by one that goes on from its last periodic snapshot; one whose
// snapshots are gone reads again from the commit. The documents are exact
// through all of it.
func TestSnapshotsHandOver(t *testing.T) {
	e := newEnv(t, 2)
	e.snapshotEvery = time.Millisecond // at every commit
	e.flushTimeout = 8 * time.Second
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4"}
	n := 0
	produce := func(from, to int) int {
		k := e.produceFleet(x, hosts, from, to)
		n += k
		return k
	}
	restored := func(in *instance, outcome string) int {
		return int(testutil.ToFloat64(in.r.m.restores.WithLabelValues(outcome)))
	}

	produce(0, 30) // 10:00 to 10:09:40
	a := e.start(e.osURL)
	waitFor(t, "first instance caught up", 60*time.Second, func() bool { return a.count("added") == n })
	a.close(t)
	for p, o := range e.committed() {
		if !strings.Contains(o.Metadata, " snap=") {
			t.Fatalf("partition %d: commit %q names no snapshot", p, o.Metadata)
		}
	}

	more := produce(30, 45) // to 10:14:40
	proxy := testenv.NewProxy(t, strings.TrimPrefix(e.osURL, "http://"))
	b := e.start("http://" + proxy.Addr())
	waitFor(t, "second instance at the end", 60*time.Second, e.atEnd(b))
	if got := b.count("added"); got != more || restored(b, "restored") != 2 {
		t.Fatalf("after a hand-over: %d records read (%d produced since), %d partitions restored of 2, %d failed",
			got, more, restored(b, "restored"), restored(b, "failed"))
	}
	more += produce(45, 60) // to 10:19:40
	waitFor(t, "second instance at the end again", 60*time.Second, e.atEnd(b))

	// b dies: its last write cannot finish, so it stores, snapshots and
	// commits nothing more.
	proxy.SetDown(true)
	b.stop()
	select {
	case err := <-b.done:
		if err == nil {
			t.Fatal("run returned nil although its final write could not reach OpenSearch")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not stop")
	}
	b.cl.Close()
	b.once.Do(func() {})
	proxy.SetDown(false)

	c := e.start(e.osURL)
	waitFor(t, "third instance at the end", 60*time.Second, e.atEnd(c))
	if got := c.count("added"); got != 0 || restored(c, "restored") != 2 {
		t.Fatalf("after a crash: %d records read again (want 0: the last periodic snapshot was taken after the last record), %d partitions restored", got, restored(c, "restored"))
	}
	c.close(t)
	compare(t, byKey(e.docs()), x.finish())

	// Without partition 0's snapshot, the next instance reads partition 0
	// again from its commit; partition 1's, read in the same pass, goes on.
	ends, err := e.adm.ListEndOffsets(context.Background(), e.stateTopic())
	if err != nil {
		t.Fatal(err)
	}
	gone := kadm.Offsets{}
	if o, ok := ends.Lookup(e.stateTopic(), 0); ok {
		gone.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	}
	if _, err := e.adm.DeleteRecords(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	d := e.start(e.osURL)
	waitFor(t, "fourth instance at the end", 60*time.Second, e.atEnd(d))
	if got := d.count("added"); got == 0 || got >= n || restored(d, "failed") != 1 || restored(d, "restored") != 1 {
		t.Fatalf("without partition 0's snapshot: %d of %d records read again, %d restores failed (want 1), %d restored (want 1)",
			got, n, restored(d, "failed"), restored(d, "restored"))
	}
	d.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestSnapshotsRebalance: a second instance joins and takes partitions
// from the first, which hands them over through snapshots: between them
// the two read every record once, and the documents are exact.
func TestSnapshotsRebalance(t *testing.T) {
	e := newEnv(t, 4)
	e.snapshotEvery = time.Hour // only at hand-overs
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4", "web-5", "web-6"}
	n := 0
	produce := func(from, to int) { n += e.produceFleet(x, hosts, from, to) }
	produce(0, 30) // 10:00 to 10:09:40
	a := e.start(e.osURL)
	waitFor(t, "first instance caught up", 60*time.Second, func() bool { return a.count("added") == n })
	b := e.start(e.osURL)
	waitFor(t, "partitions handed over", 60*time.Second, func() bool {
		return int(testutil.ToFloat64(b.r.m.restores.WithLabelValues("restored"))) > 0
	})
	produce(30, 45) // to 10:14:40
	waitFor(t, "every record read once between them", 60*time.Second, func() bool { return a.count("added")+b.count("added") == n })
	time.Sleep(2 * time.Second) // nothing read twice after that either
	if got := a.count("added") + b.count("added"); got != n || testutil.ToFloat64(b.r.m.restores.WithLabelValues("failed")) != 0 {
		t.Fatalf("%d records read by the two instances, %d produced; %v restores failed", got, n, testutil.ToFloat64(b.r.m.restores.WithLabelValues("failed")))
	}
	a.close(t)
	b.close(t)
	compare(t, byKey(e.docs()), x.finish())
}

// TestHandOverAfterIdleFlush: an instance snapshots its partitions after
// their last record, then its idle flush writes the windows still open;
// the snapshot its hand-over passes on must know them written, or their
// next owner writes every one of them again (seen in part E of the
// pipeline bench: a 3-instance round wrote 1.6 times the documents of a
// 1-instance round, the first round's documents stored twice). Each
// document of the windows before the next owner's records is stored once.
func TestHandOverAfterIdleFlush(t *testing.T) {
	e := newEnv(t, 2)
	e.snapshotEvery = time.Millisecond // at every commit
	e.idle = 3 * time.Second
	x := expected{}
	hosts := []string{"web-1", "web-2", "web-3", "web-4"}
	n := e.produceFleet(x, hosts, 0, 30) // 10:00 to 10:09:43
	a := e.start(e.osURL)
	waitFor(t, "first instance caught up", 60*time.Second, func() bool { return a.count("added") == n })
	// The open hour is written only by the idle flush.
	waitFor(t, "first instance's idle flush", 60*time.Second, func() bool {
		for _, d := range e.docs() {
			if d.Resolution == indices.ResolutionHour {
				return true
			}
		}
		return false
	})
	a.close(t)

	more := e.produceFleet(x, hosts, 30, 31) // 10:10:00 to 10:10:03
	b := e.start(e.osURL)
	waitFor(t, "second instance at the end", 60*time.Second, e.atEnd(b))
	if got := b.count("added"); got != more || testutil.ToFloat64(b.r.m.restores.WithLabelValues("restored")) != 2 {
		t.Fatalf("%d records read (%d produced since), %v partitions restored of 2", got, more, testutil.ToFloat64(b.r.m.restores.WithLabelValues("restored")))
	}
	// b's idle flush writes the windows of its records (10:10).
	waitFor(t, "second instance's idle flush", 60*time.Second, func() bool {
		for _, d := range e.docs() {
			if d.Resolution == indices.ResolutionMinute && d.Timestamp.Equal(t0.Add(10*time.Minute)) {
				return true
			}
		}
		return false
	})
	b.close(t)
	compare(t, byKey(e.docs()), x.finish())

	versions := e.versions(t0.Add(10 * time.Minute))
	if len(versions) == 0 {
		t.Fatal("no documents before 10:10")
	}
	for id, v := range versions {
		if v != 1 {
			t.Errorf("document %s of a window before the second instance's records stored %d times", id, v)
		}
	}
}
