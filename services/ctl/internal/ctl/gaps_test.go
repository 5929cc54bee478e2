package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// TestFillGaps: the topics begin at since; the old generation holds a day
// of samples and a month of rollups reaching back before it, and stacks the
// new one never saw. Before the swap the new generation gets the rollups
// from before since (the window that began before it from the old one, not
// the partial rebuild), the stacks it lacks (its own stay), and the day of
// samples, which cannot be copied, stays on the old generation.
func TestFillGaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "gaps-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), osc, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, osc, names.Prefix, indices.Settings{Replicas: 0}); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	before, after := since.Add(-30*time.Minute), since.Add(30*time.Minute)
	day, month := names.Samples(since), names.Rollups(since)
	doc := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sample := func(at time.Time, host string) []byte {
		d := indices.SampleDoc{Timestamp: at, Type: "cpu", Host: host, Service: "s", Value: 1}
		if err := d.SetStacks([]string{"S1"}, []int64{1}); err != nil {
			t.Fatal(err)
		}
		return doc(d)
	}
	hour := func(at time.Time, v int64) indices.RollupDoc {
		return indices.RollupDoc{Timestamp: at.Truncate(time.Hour), Resolution: "1h", Kind: "service", Type: "cpu", Service: "s", Value: v}
	}
	straddleOld, straddleNew, later := hour(since.Add(-time.Minute), 10), hour(since.Add(-time.Minute), 3), hour(after.Add(time.Hour), 5)
	// The hour's stacks: one document per stack in the old generation
	// (before rollups schema 3), packed in the new one, which holds only
	// part of the hour; a packed hour after since is the new one's own.
	oldStack := indices.RollupDoc{Timestamp: straddleOld.Timestamp, Resolution: "1h", Kind: indices.KindStack, Type: "cpu", Service: "s", StackIDs: []string{"S1"}, Value: 10}
	packed := func(at time.Time) indices.RollupDoc {
		d := indices.RollupDoc{Timestamp: at, Resolution: "1h", Kind: indices.KindStacks, Type: "cpu", Service: "s", Value: 3}
		if err := d.SetStacks([]string{"S1"}, []int64{3}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	partial, laterPacked := packed(straddleOld.Timestamp), packed(later.Timestamp)
	stack := func(leaf string) []byte {
		return doc(indices.StackDoc{Timestamp: since, Leaf: leaf, Functions: []string{leaf}, Depth: 1})
	}
	items := []bulk.Item{
		{Index: names.Physical(1, names.Stacks()), ID: "S1", Doc: stack("old")},
		{Index: names.Physical(1, names.Stacks()), ID: "S2", Doc: stack("old")},
		{Index: names.Physical(1, day), ID: "a", Doc: sample(before, "a")},
		{Index: names.Physical(1, day), ID: "b", Doc: sample(after, "b")},
		{Index: names.Physical(1, month), ID: indices.RollupID(&straddleOld), Doc: doc(straddleOld)},
		{Index: names.Physical(1, month), ID: indices.RollupID(&later), Doc: doc(later)},
		{Index: names.Physical(1, month), ID: indices.RollupID(&oldStack), Doc: doc(oldStack)},
		{Index: names.Physical(2, month), ID: indices.RollupID(&partial), Doc: doc(partial)},
		{Index: names.Physical(2, month), ID: indices.RollupID(&laterPacked), Doc: doc(laterPacked)},
		{Index: names.Physical(2, names.Stacks()), ID: "S2", Doc: stack("new")},
		{Index: names.Physical(2, day), ID: "b", Doc: sample(after, "b")},
		{Index: names.Physical(2, month), ID: indices.RollupID(&straddleNew), Doc: doc(straddleNew)},
		{Index: names.Physical(2, month), ID: indices.RollupID(&later), Doc: doc(later)},
	}
	if rejected, err := bulk.New(osc, bulk.Options{}).Write(ctx, items); err != nil || len(rejected) > 0 {
		t.Fatalf("write: %v %v", rejected, err)
	}
	if err := refresh(ctx, osc, []string{names.Prefix + "*"}); err != nil {
		t.Fatal(err)
	}
	l, _ := opensearch.ReadLayout(ctx, osc, names)
	if err := opensearch.PlanSwap(l, names, 1).Apply(ctx, osc); err != nil {
		t.Fatal(err)
	}
	l, _ = opensearch.ReadLayout(ctx, osc, names)

	var out bytes.Buffer
	g, err := fillGaps(ctx, osc, names, l, 2, since, 100*time.Millisecond, &out)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.KeptSamples, []string{day}) || g.RollupsCopy != 2 || g.StacksCopied != 1 {
		t.Fatalf("gaps %+v, want the day kept, 2 rollups and 1 stack copied", g)
	}
	l, _ = opensearch.ReadLayout(ctx, osc, names)
	s := opensearch.PlanSwap(l, names, 2, g.KeptSamples...)
	if !slices.Equal(s.Kept, []string{day}) || !slices.Equal(s.Moved, []string{month, names.Stacks()}) {
		t.Fatalf("swap after the gaps: moved %v, kept %v", s.Moved, s.Kept)
	}
	var got struct {
		Source indices.RollupDoc `json:"_source"`
	}
	if err := getJSON(ctx, osc, "/"+names.Physical(2, month)+"/_doc/"+indices.RollupID(&straddleOld), &got); err != nil || got.Source.Value != 10 {
		t.Fatalf("the window that began before since holds %d, want the old generation's 10 (%v)", got.Source.Value, err)
	}
	for _, c := range []struct {
		d    indices.RollupDoc
		want int
	}{{oldStack, http.StatusOK}, {partial, http.StatusNotFound}, {laterPacked, http.StatusOK}} {
		if st, _, err := opensearch.Raw(ctx, osc, http.MethodHead, "/"+names.Physical(2, month)+"/_doc/"+indices.RollupID(&c.d), nil); err != nil || st != c.want {
			t.Fatalf("%s %s stack rollup in the new generation: HTTP %d (%v), want %d", c.d.Kind, c.d.Timestamp, st, err, c.want)
		}
	}
	var st struct {
		Source indices.StackDoc `json:"_source"`
	}
	if err := getJSON(ctx, osc, "/"+names.Physical(2, names.Stacks())+"/_doc/S2", &st); err != nil || st.Source.Leaf != "new" {
		t.Fatalf("the new generation's own stack became %q (%v)", st.Source.Leaf, err)
	}
	if st, _, err := opensearch.Raw(ctx, osc, http.MethodHead, "/"+names.Physical(2, names.Stacks()), nil); err != nil || st != http.StatusOK {
		t.Fatal("the new stacks index is gone")
	}
}

// TestFirstRecord: a topic that still starts at offset 0 everywhere holds
// every record (no gaps to fill); once retention deleted a partition's
// start (DeleteRecords, what retention does), it is trimmed and since is
// the latest first record over the partitions.
func TestFirstRecord(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.KafkaBrokers(t)
	cl, adm := manualClient(t, brokers)
	topic := testenv.Name(t, "first-")
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), topic) })
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for p := int32(0); p < 2; p++ {
		for i := range 5 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x"), Timestamp: base.Add(time.Duration(int(p)*100+i) * time.Second)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t0, trimmed, err := firstRecord(ctx, adm, topic, time.UnixMilli(0))
	if err != nil || trimmed || !t0.Equal(base.Add(100*time.Second)) {
		t.Fatalf("whole topic: %v, trimmed %v, %v; want %v, false", t0, trimmed, err, base.Add(100*time.Second))
	}
	if _, err := firstRecordAfterDelete(ctx, adm, topic); err != nil {
		t.Fatal(err)
	}
	t0, trimmed, err = firstRecord(ctx, adm, topic, time.UnixMilli(0))
	if err != nil || !trimmed || !t0.Equal(base.Add(103*time.Second)) {
		t.Fatalf("partition 1 trimmed to offset 3: %v, trimmed %v, %v; want %v, true", t0, trimmed, err, base.Add(103*time.Second))
	}
	if _, trimmed, _ = firstRecord(ctx, adm, topic, base.Add(2*time.Second)); !trimmed {
		t.Fatal("a --from past the first records is not trimmed")
	}
}

// firstRecordAfterDelete deletes the first 3 records of partition 1.
func firstRecordAfterDelete(ctx context.Context, adm *kadm.Client, topic string) (kadm.DeleteRecordsResponses, error) {
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: topic, Partition: 1, At: 3})
	resp, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = resp.Error()
	}
	return resp, err
}
