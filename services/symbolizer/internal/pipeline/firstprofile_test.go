package pipeline

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// TestFirstProfileOfNewBinary: the agent publishes a new binary's debuginfo
// and, just after, the first profile that needs it. The debuginfo follower
// here reads late (its fetches wait up to 3 s for a megabyte), so the
// profile reaches the runner first; the miss waits for the follower to read
// the topic up to its end and the profile comes out fully named.
func TestFirstProfileOfNewBinary(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	topics, cl := ktest.Topics(t, brokers, 1)
	ctx := context.Background()
	// Every binary but the new one is in a debug dir.
	dir := t.TempDir()
	for _, b := range []struct{ bin *testbin.Binary }{{corpus.C}, {corpus.CXX}, {corpus.Go}} {
		from := b.bin.DebugPath
		if b.bin == corpus.Go {
			from = b.bin.Path
		}
		testbin.CopyFile(t, from, filepath.Join(dir, ".build-id", b.bin.BuildID[:2], b.bin.BuildID[2:]+".debug"))
	}
	s := startWith(t, startOpts{
		debuginfoWait: 30 * time.Second,
		infoOpts:      []kgo.Opt{kgo.FetchMinBytes(1 << 20), kgo.FetchMaxWait(3 * time.Second)},
	}, brokers, topics, testenv.Name(t, "grp-"), source.Dirs{Dirs: []string{dir}})

	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	produce := func(v []byte) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.ProfilesRaw, Value: v, Headers: meta.Headers()}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A profile naming no binary shows the runner is past start-up.
	warm, _ := record.EncodeProfile(pproftest.NewCPU(time.Now(), time.Second).Sample(nil, []int64{1, 1}, "kernel_fn").Profile())
	produce(warm)
	if out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 1, time.Minute, 0); len(out) != 1 {
		t.Fatalf("warm-up: %d records", len(out))
	}

	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Debuginfo, Key: []byte(corpus.Topic.BuildID), Value: corpus.TopicValue}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	first, _ := record.EncodeProfile(corpus.Profile(t, 0))
	produce(first)
	out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 2, time.Minute, 0)
	if len(out) != 2 {
		t.Fatalf("%d records, want 2", len(out))
	}
	p, err := record.DecodeProfile(out[1].Value)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := testbin.Names(p), corpus.Want(); !reflect.DeepEqual(got, want) {
		t.Fatalf("first profile of the new binary:\n%q\nwant\n%q", got, want)
	}
	s.stop()
}
