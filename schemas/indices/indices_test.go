package indices

import (
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

func TestTemplatesApplySettings(t *testing.T) {
	ts, err := Default.Templates(Settings{Shards: 3, Replicas: 1, RefreshInterval: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("got %d templates", len(ts))
	}
	for _, tpl := range ts {
		var doc struct {
			Template struct {
				Settings struct {
					Index map[string]any `json:"index"`
				} `json:"settings"`
			} `json:"template"`
		}
		if err := json.Unmarshal(tpl.Body, &doc); err != nil {
			t.Fatal(err)
		}
		idx := doc.Template.Settings.Index
		if idx["number_of_shards"] != 3.0 || idx["number_of_replicas"] != 1.0 || idx["refresh_interval"] != "30s" {
			t.Errorf("%s: settings %v", tpl.Name, idx)
		}
	}
}

func TestIndexNames(t *testing.T) {
	ts := time.Date(2026, 11, 30, 23, 59, 0, 0, time.FixedZone("x", -3600))
	if got := Default.Samples(ts); got != "stackstream-samples-2026.12.01" {
		t.Errorf("SamplesIndex = %s", got)
	}
	if got := Default.Rollups(ts); got != "stackstream-rollups-2026.12" {
		t.Errorf("RollupsIndex = %s", got)
	}
	if tm, ok := (Names{Prefix: "t1-"}).IndexTime("t1-samples-2026.12.01"); !ok || tm.Day() != 1 {
		t.Errorf("IndexTime = %v %v", tm, ok)
	}
}

func TestIDsAreDeterministic(t *testing.T) {
	frames := []Frame{{Function: "a"}, {Function: "b", File: "b.go", Line: 2}}
	if StackID(frames) != StackID(append([]Frame(nil), frames...)) {
		t.Fatal("StackID differs for equal frames")
	}
	if StackID(frames) == StackID(frames[:1]) {
		t.Fatal("StackID equal for different frames")
	}
	now := time.Unix(100, 0)
	a := SampleID("h", "cpu", now, map[string]string{"a": "1", "b": "2"})
	b := SampleID("h", "cpu", now, map[string]string{"b": "2", "a": "1"})
	if a != b {
		t.Fatal("SampleID depends on map order")
	}
}

func TestTemplateNamesMatchTemplates(t *testing.T) {
	n := Names{Prefix: "p-"}
	ts, err := n.Templates(DefaultSettings)
	if err != nil {
		t.Fatal(err)
	}
	names := n.TemplateNames()
	if len(names) != len(ts) {
		t.Fatalf("TemplateNames = %v, templates %d", names, len(ts))
	}
	for i, tpl := range ts {
		if tpl.Name != names[i] {
			t.Errorf("template %d named %s, TemplateNames says %s", i, tpl.Name, names[i])
		}
	}
}

func TestSampleIDPart(t *testing.T) {
	at := time.Unix(100, 0)
	labels := map[string]string{"pid": "1", "service": "api"}
	if SampleIDPart("h", "cpu", at, "", labels) != SampleID("h", "cpu", at, labels) {
		t.Fatal("an empty part changed the ID: replays of records that were not split would duplicate")
	}
	p0, p1 := SampleIDPart("h", "cpu", at, "0", labels), SampleIDPart("h", "cpu", at, "1", labels)
	if p0 == p1 || p0 == SampleID("h", "cpu", at, labels) {
		t.Fatalf("parts share an ID: %s %s", p0, p1)
	}
}

// TestSamplesTemplateMapsContractLabels: the samples mapping declares
// exactly record.ContractLabels under labels (not dynamic), and the other
// labels' two fields, so no label key can add a field.
func TestSamplesTemplateMapsContractLabels(t *testing.T) {
	ts, err := Default.Templates(DefaultSettings)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Template struct {
			Mappings struct {
				Dynamic          string            `json:"dynamic"`
				DynamicTemplates []json.RawMessage `json:"dynamic_templates"`
				Properties       map[string]struct {
					Type        string `json:"type"`
					Dynamic     *bool  `json:"dynamic"`
					IgnoreAbove int    `json:"ignore_above"`
					Properties  map[string]struct {
						Type        string `json:"type"`
						IgnoreAbove int    `json:"ignore_above"`
					} `json:"properties"`
				} `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(ts[1].Body, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Template.Mappings
	if m.Dynamic != "strict" || len(m.DynamicTemplates) != 0 {
		t.Fatalf("samples mapping dynamic=%q with %d dynamic templates, want strict and none", m.Dynamic, len(m.DynamicTemplates))
	}
	labels := m.Properties["labels"]
	if labels.Dynamic == nil || *labels.Dynamic || len(labels.Properties) != len(record.ContractLabels) {
		t.Fatalf("labels = %+v, want dynamic false with the %d contract labels", labels, len(record.ContractLabels))
	}
	for _, name := range record.ContractLabels {
		if p := labels.Properties[name]; p.Type != "keyword" || p.IgnoreAbove != record.MaxLabelValueBytes {
			t.Errorf("labels.%s = %+v, want keyword with ignore_above %d", name, p, record.MaxLabelValueBytes)
		}
	}
	for _, f := range []string{"label_pairs", "label_names"} {
		if m.Properties[f].Type != "keyword" {
			t.Errorf("%s = %+v, want keyword", f, m.Properties[f])
		}
	}
}

func TestSetLabels(t *testing.T) {
	var d SampleDoc
	d.SetLabels(map[string]string{"pid": "1", "zone": "a", "comm": "api", "Rack": "r=2"})
	if len(d.Labels) != 2 || d.Labels["pid"] != "1" || d.Labels["comm"] != "api" {
		t.Fatalf("Labels = %v, want the contract labels pid and comm", d.Labels)
	}
	if !slices.Equal(d.LabelPairs, []string{"Rack=r=2", "zone=a"}) || !slices.Equal(d.LabelNames, []string{"Rack", "zone"}) {
		t.Fatalf("pairs %q names %q", d.LabelPairs, d.LabelNames)
	}
	d.SetLabels(nil)
	if d.Labels != nil || d.LabelPairs != nil || d.LabelNames != nil {
		t.Fatalf("SetLabels(nil) left %+v", d)
	}
}

func TestStackKinds(t *testing.T) {
	frames := []Frame{
		{Function: "do_syscall_64", Binary: record.MappingKernel, Kind: record.KindKernel},
		{Function: "serve", Binary: record.MappingPython, Kind: record.KindPython},
		{Function: "_PyEval_EvalFrameDefault", Binary: "python3.12"},
		{Function: "main", Binary: "python3.12"},
		{Function: "<module>", Binary: record.MappingPython, Kind: record.KindPython},
	}
	if got, want := StackKinds(frames), []string{"kernel", "native", "python"}; !slices.Equal(got, want) {
		t.Fatalf("StackKinds = %q, want %q", got, want)
	}
	// The kind is not hashed: it follows from the binary.
	plain := slices.Clone(frames)
	for i := range plain {
		plain[i].Kind = ""
	}
	if StackID(plain) != StackID(frames) {
		t.Fatal("StackID depends on Kind")
	}
	// Frames stored before schema 2 have no kind: their binary tells.
	for i, f := range plain {
		if f.FrameKind() != frames[i].FrameKind() || f.FrameKind() == "" {
			t.Fatalf("frame %d: FrameKind %q, stored with kind %q", i, f.FrameKind(), frames[i].FrameKind())
		}
	}
}

func TestIndexEnd(t *testing.T) {
	n := Names{Prefix: "p-"}
	for index, want := range map[string]string{
		"p-samples-2026.12.01": "2026-12-02T00:00:00Z",
		"p-rollups-2026.12":    "2027-01-01T00:00:00Z",
		"p-rollups-2026.02":    "2026-03-01T00:00:00Z",
	} {
		got, ok := n.IndexEnd(index)
		if !ok || got.Format(time.RFC3339) != want {
			t.Errorf("IndexEnd(%s) = %v, %v; want %s", index, got, ok, want)
		}
	}
	for _, index := range []string{"p-stacks", "q-samples-2026.12.01", "p-samples-soon"} {
		if _, ok := n.IndexEnd(index); ok {
			t.Errorf("IndexEnd(%s) read a period", index)
		}
	}
}

// TestStackIDIsHashID: StackID hashes its frames at once (or, past 8 KiB,
// part by part), as hashID of their parts would (the IDs stored must not
// change).
func TestStackIDIsHashID(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 15))
	word := func() string {
		b := make([]byte, rng.IntN(300)+rng.IntN(2)*rng.IntN(9000))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	for n := range 40 {
		frames := make([]Frame, n)
		var parts []string
		for i := range frames {
			frames[i] = Frame{Function: word(), File: word(), Line: rng.Int64N(1<<40) - 1<<39, Binary: word()}
			parts = append(parts, frames[i].Function, frames[i].File, strconv.FormatInt(frames[i].Line, 10), frames[i].Binary)
		}
		if got, want := StackID(frames), hashID(parts...); got != want {
			t.Fatalf("%d frames: StackID %s, hashID %s", n, got, want)
		}
	}
}

// TestStackIDValues: the IDs stored (the indexer's and the rollup's stack
// documents) do not change: two IDs as StackID computed them before
// AppendStackText (2026-12-02), and a stack's ID is the sha256 of its
// frames' texts one after the other, as the rollup hashes them.
func TestStackIDValues(t *testing.T) {
	frames := []Frame{
		{Function: "main.main", File: "/src/main.go", Line: 12, Binary: "app"},
		{Function: "runtime.main", File: "proc.go", Line: -3},
		{Function: "0x4f00", Binary: "libc.so.6", Kind: "native"},
	}
	if got := StackID(frames); got != "Hvy8xNCjRjORs3Ue" {
		t.Errorf("StackID = %s, was Hvy8xNCjRjORs3Ue", got)
	}
	if got := StackID(nil); got != "47DEQpj8HBSa-_TI" {
		t.Errorf("StackID(nil) = %s, was 47DEQpj8HBSa-_TI", got)
	}
	h := sha256.New()
	for _, f := range frames {
		h.Write(AppendStackText(nil, f))
	}
	if got := StackIDOfSum(h.Sum(nil)); got != StackID(frames) {
		t.Errorf("the texts hashed: %s, StackID %s", got, StackID(frames))
	}
}
