package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
)

// buildSome builds the named binaries (see binaries) into a temporary directory.
func buildSome(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range names {
		pkg := "../services/" + strings.TrimPrefix(b, "stackstream-") + "/cmd/" + b
		if b == "stackctl" {
			pkg = "../services/ctl/cmd/stackctl"
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	return dir
}

type kindNode struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"`
	Total    int64      `json:"total"`
	Children []kindNode `json:"children"`
}

// paths lists every node of the tree as "name/kind" paths from the root's
// children down, with their totals.
func (n kindNode) paths(prefix string, out map[string]int64) {
	for _, c := range n.Children {
		p := prefix + "/" + c.Name + "(" + c.Kind + ")"
		out[p] = c.Total
		c.paths(p, out)
	}
}

// TestFrameKinds sends a raw profile whose stacks mix native frames with
// the frames the agent names on its pseudo-files (kernel, python, java, js,
// jit) through the real symbolizer and indexer binaries into OpenSearch: the
// named frames arrive as they were sent, the stacks index stores their
// kinds, and the query API's flame graph carries each frame's kind.
func TestFrameKinds(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	osURL := testenv.OpenSearchURL(t)
	bin := buildSome(t, "stackctl", "stackstream-symbolizer", "stackstream-indexer", "stackstream-query")

	name := testenv.Name(t, "e2e-kinds-")
	queryAddr, symMetrics := freeAddr(t), freeAddr(t)
	env := []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + name + ".",
		"STACKSTREAM_OPENSEARCH_URL=" + osURL,
		"STACKSTREAM_OPENSEARCH_INDEX_PREFIX=" + name + "-",
		"STACKSTREAM_OPENSEARCH_INDEX_REFRESH_INTERVAL=1s",
		"STACKSTREAM_CTL_PARTITIONS=1",
		"STACKSTREAM_SYMBOLIZER_GROUP=" + name + "-symbolizer",
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + name + "-symbolizer-0",
		// The native binary is unknown everywhere: no debuginfod to ask.
		"DEBUGINFOD_URLS=",
		"STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS=",
		"STACKSTREAM_INDEXER_GROUP=" + name + "-indexer",
		"STACKSTREAM_QUERY_LISTEN_ADDR=" + queryAddr,
	}
	t.Cleanup(func() { cleanup(t, brokers, name, osURL) })
	ctl := exec.Command(filepath.Join(bin, "stackctl"), "init")
	ctl.Env = append(os.Environ(), env...)
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("stackctl init: %v\n%s", err, out)
	}
	start(t, filepath.Join(bin, "stackstream-symbolizer"), append(env, "STACKSTREAM_LISTEN_ADDR="+symMetrics))
	start(t, filepath.Join(bin, "stackstream-indexer"), append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))
	start(t, filepath.Join(bin, "stackstream-query"), append(env, "STACKSTREAM_LISTEN_ADDR="+freeAddr(t)))

	// One profile: a Python request handler over the interpreter's native
	// frames and a syscall, and a Java thread calling into JS through JIT code.
	id := make([]byte, 20)
	rand.Read(id)
	b := pproftest.NewCPU(time.Now(), 10*time.Second)
	native := b.Mapping(0x7f0000000000, 0x7f0000100000, 0, "/usr/bin/python3.12", hex.EncodeToString(id))
	kernel := b.Mapping(0, 0, 0, record.MappingKernel, "")
	python := b.Mapping(0, 0, 0, record.MappingPython, "")
	java := b.Mapping(0, 0, 0, record.MappingJava, "")
	js := b.Mapping(0, 0, 0, record.MappingJS, "")
	jit := b.Mapping(0x7e0000000000, 0x7e0000100000, 0, record.MappingJIT, "")
	l := map[string]string{record.LabelPID: "7", record.LabelComm: "polyglot"}
	b.LocationSample(l, []int64{6, 6 * tick},
		b.NamedLocation(kernel, 0xffffffff81000010, "do_syscall_64", "", 0),
		b.NamedLocation(python, 0, "Handler.serve", "/srv/app/handler.py", 42),
		b.AddressLocation(native, 0x7f0000001010),
		b.AddressLocation(native, 0x7f0000002020))
	b.LocationSample(l, []int64{4, 4 * tick},
		b.NamedLocation(js, 0, "(anonymous)", "file:///srv/app/index.js", 7),
		b.NamedLocation(jit, 0x7e0000000200, "LazyCompile:*loop", "", 0),
		b.NamedLocation(java, 0x7e0000000100, "com.example.Cart.total", "Cart.java", 88))
	raw, err := record.EncodeProfile(b.Profile())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := mustClient(t, brokers)
	defer cl.Close()
	host := name
	rec := &kgo.Record{Topic: kafka.Config{TopicPrefix: name + "."}.Topics().ProfilesRaw, Key: []byte(host), Value: raw,
		Headers: record.Meta{Type: record.ProfileCPU, Host: host, AgentVersion: "e2e-kinds"}.Headers()}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	base := "http://" + queryAddr + "/api/v1/"
	sel := url.QueryEscape(`{host="` + host + `"}`)
	var fg struct {
		Total int64    `json:"total"`
		Root  kindNode `json:"root"`
	}
	waitFor(ctx, t, "the profile's flame graph", func() bool {
		return getJSON(base+"flamegraph?type=cpu&from=now-15m&to=now&query="+sel, &fg) == nil && fg.Total == 10*tick
	})
	got := map[string]int64{}
	fg.Root.paths("", got)
	want := map[string]int64{
		"/python3.12+0x2020()":                                                                 6 * tick,
		"/python3.12+0x2020()/python3.12+0x1010()":                                             6 * tick,
		"/python3.12+0x2020()/python3.12+0x1010()/Handler.serve(python)":                       6 * tick,
		"/python3.12+0x2020()/python3.12+0x1010()/Handler.serve(python)/do_syscall_64(kernel)": 6 * tick,
		"/com.example.Cart.total(java)":                                                        4 * tick,
		"/com.example.Cart.total(java)/LazyCompile:*loop(jit)":                                 4 * tick,
		"/com.example.Cart.total(java)/LazyCompile:*loop(jit)/(anonymous)(js)":                 4 * tick,
	}
	for p, v := range want {
		if got[p] != v {
			t.Errorf("flame graph node %s: total %d, want %d", p, got[p], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("flame graph nodes %v, want %v", got, want)
	}

	// The stacks index holds the kinds: per frame (none for native code) and
	// per stack.
	var stacks struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Frames []struct{ Function, File, Kind string } `json:"frames"`
					Kinds  []string                                `json:"kinds"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := getJSON(osURL+"/"+name+"-stacks/_search?q=kinds:python", &stacks); err != nil {
		t.Fatal(err)
	}
	if len(stacks.Hits.Hits) != 1 {
		t.Fatalf("%d stacks with kinds:python, want 1: %+v", len(stacks.Hits.Hits), stacks)
	}
	s := stacks.Hits.Hits[0].Source
	if strings.Join(s.Kinds, ",") != "kernel,native,python" {
		t.Errorf("stack kinds %q, want kernel, native, python", s.Kinds)
	}
	if len(s.Frames) != 4 || s.Frames[0].Kind != "kernel" || s.Frames[1].Kind != "python" || s.Frames[1].File != "/srv/app/handler.py" || s.Frames[2].Kind != "" {
		t.Errorf("stored frames %+v", s.Frames)
	}

	// The symbolizer looked up the native binary only: its two frames are
	// the only unresolved ones; the five named ones passed through.
	if n := metricValue(t, symMetrics, `stackstream_symbolizer_frames_total{source="unresolved"}`); n != 2 {
		t.Errorf("symbolizer counted %v unresolved frames, want 2", n)
	}
	if n := metricValue(t, symMetrics, `stackstream_symbolizer_frames_total{source="presymbolized"}`); n != 5 {
		t.Errorf("symbolizer counted %v presymbolized frames, want 5", n)
	}
}
