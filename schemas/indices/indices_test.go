package indices

import (
	"encoding/json"
	"testing"
	"time"
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
