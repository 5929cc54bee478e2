package api

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"now", now},
		{"now-15m", now.Add(-15 * time.Minute)},
		{"now-1h", now.Add(-time.Hour)},
		{"now-7d", now.Add(-7 * 24 * time.Hour)},
		{"now-2w", now.Add(-14 * 24 * time.Hour)},
		{"2026-11-30T10:00:00Z", now.Add(-2 * time.Hour)},
		{"2026-11-30T11:00:00+01:00", now.Add(-2 * time.Hour)},
		{"1796032800000", time.UnixMilli(1796032800000).UTC()},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTime("from", tc.in, now)
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("parseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"yesterday", "now+1h", "now-1y", "now-", "12", "2026-11-30"} {
		if _, err := parseTime("from", bad, now); err == nil {
			t.Errorf("parseTime(%q) succeeded", bad)
		}
	}
}

func TestChooseStep(t *testing.T) {
	tests := []struct {
		requested, rng time.Duration
		lines          int
		want           time.Duration
	}{
		{0, time.Hour, 0, time.Minute},
		{0, 6 * time.Hour, 0, 2 * time.Minute},
		{0, 11 * time.Hour, 0, 5 * time.Minute},
		{0, 12 * time.Hour, 0, 10 * time.Minute}, // long ranges: multiples of 10 minutes
		{0, 24 * time.Hour, 0, 10 * time.Minute},
		{0, 24 * time.Hour, 10, 10 * time.Minute},
		{0, 24 * time.Hour, 100, 30 * time.Minute},
		{0, 24 * time.Hour, 1000, 30 * time.Minute},
		{0, time.Hour, 100, time.Minute},
		{0, 7 * 24 * time.Hour, 0, time.Hour},
		{0, 31 * 24 * time.Hour, 0, 3 * time.Hour},
		{90 * time.Second, time.Hour, 100, 2 * time.Minute},
		{time.Second, time.Hour, 0, time.Minute},
	}
	for _, tc := range tests {
		got, err := chooseStep(tc.requested, tc.rng, tc.lines)
		if err != nil || got != tc.want {
			t.Errorf("chooseStep(%s, %s, %d) = %s, %v; want %s", tc.requested, tc.rng, tc.lines, got, err, tc.want)
		}
	}
	if _, err := chooseStep(time.Minute, 31*24*time.Hour, 0); err == nil {
		t.Error("chooseStep(1m, 31d) accepted 44640 points")
	}
}

func TestTrees(t *testing.T) {
	values := map[string]int64{"a": 60, "b": 30, "c": 10, "": 5}
	frames := map[string][]string{
		"a": {"main", "work", "hash"},
		"b": {"main", "work"},
		"c": {"main", "rec", "rec"},
		"":  {noStack},
	}
	root := buildTree(values, frames, nil)
	full, truncated := flame(root, 100)
	if truncated != 0 || full.Total != 105 {
		t.Fatalf("flame total %d truncated %v", full.Total, truncated)
	}
	js, _ := json.Marshal(full)
	want := `{"name":"total","self":0,"total":105,"children":[` +
		`{"name":"main","self":0,"total":100,"children":[` +
		`{"name":"work","self":30,"total":90,"children":[{"name":"hash","self":60,"total":60,"children":[]}]},` +
		`{"name":"rec","self":0,"total":10,"children":[{"name":"rec","self":10,"total":10,"children":[]}]}]},` +
		`{"name":"[no stack]","self":5,"total":5,"children":[]}]}`
	if string(js) != want {
		t.Fatalf("flame\n got %s\nwant %s", js, want)
	}
	pruned, truncated := flame(root, 3)
	js, _ = json.Marshal(pruned)
	want = `{"name":"total","self":0,"total":105,"children":[` +
		`{"name":"main","self":0,"total":100,"children":[` +
		`{"name":"work","self":30,"total":90,"children":[{"name":"hash","self":60,"total":60,"children":[]}]},` +
		`{"name":"[other]","self":10,"total":10,"children":[]}]},` +
		`{"name":"[other]","self":5,"total":5,"children":[]}]}`
	if truncated == 0 || string(js) != want {
		t.Fatalf("pruned flame (truncated %v)\n got %s\nwant %s", truncated, js, want)
	}

	top := topFunctions(values, frames, 105, 10)
	byName := map[string]Function{}
	for _, f := range top {
		byName[f.Name] = f
	}
	if f := byName["rec"]; f.Total != 10 || f.Self != 10 {
		t.Fatalf("recursive function counted %+v, want total 10 self 10", f)
	}
	if f := byName["main"]; f.Total != 100 || f.Self != 0 || top[0].Name != "hash" {
		t.Fatalf("main %+v, first %+v", f, top[0])
	}

	cmpRoot := buildTree(map[string]int64{"a": 10, "c": 30}, frames, nil)
	d, _ := diffTree(root, cmpRoot, 100)
	if d.Base != 1 || d.Compare != 1 {
		t.Fatalf("diff root %+v", d)
	}
	main := d.Children[0]
	if main.Name != "main" || main.Children[0].Name != "work" {
		t.Fatalf("diff children %+v", main.Children)
	}
	if w := main.Children[0]; w.Base != 90.0/105 || w.Compare != 0.25 {
		t.Fatalf("work base %v compare %v, want %v 0.25", w.Base, w.Compare, 90.0/105)
	}
	if r := main.Children[1]; r.Name != "rec" || r.Base != 10.0/105 || r.Compare != 0.75 {
		t.Fatalf("rec %+v", r)
	}
}

func TestParseRangeDefaults(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tr, err := parseRange(url.Values{}, "from", "to", now, 31*24*time.Hour)
	if err != nil || !tr.From.Equal(now.Add(-time.Hour)) || !tr.To.Equal(now) {
		t.Fatalf("default range %v %v", tr, err)
	}
}

// TestTreeKinds: a frame's kind travels to its node; a Python function and
// a native one of the same name under one parent are two nodes, and the
// diff keeps the kinds of both sides.
func TestTreeKinds(t *testing.T) {
	values := map[string]int64{"py": 6, "c": 3, "k": 1}
	frames := map[string][]string{
		"py": {"main", "_PyEval_EvalFrameDefault", "run", "do_syscall_64"},
		"c":  {"main", "_PyEval_EvalFrameDefault", "run"},
		"k":  {"do_syscall_64"},
	}
	kinds := map[string][]string{
		"py": {"", "", "python", "kernel"},
		"k":  {"kernel"},
	}
	root, _ := flame(buildTree(values, frames, kinds), 100)
	js, _ := json.Marshal(root)
	want := `{"name":"total","self":0,"total":10,"children":[` +
		`{"name":"main","self":0,"total":9,"children":[{"name":"_PyEval_EvalFrameDefault","self":0,"total":9,"children":[` +
		`{"name":"run","kind":"python","self":0,"total":6,"children":[{"name":"do_syscall_64","kind":"kernel","self":6,"total":6,"children":[]}]},` +
		`{"name":"run","self":3,"total":3,"children":[]}]}]},` +
		`{"name":"do_syscall_64","kind":"kernel","self":1,"total":1,"children":[]}]}`
	if string(js) != want {
		t.Fatalf("flame\n got %s\nwant %s", js, want)
	}
	d, _ := diffTree(buildTree(values, frames, kinds), buildTree(map[string]int64{"k": 1}, frames, kinds), 100)
	var got []string
	var walk func(n *DiffNode)
	walk = func(n *DiffNode) {
		got = append(got, n.Name+"/"+n.Kind)
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(d)
	if w := []string{"total/", "do_syscall_64/kernel", "main/", "_PyEval_EvalFrameDefault/", "run/python", "do_syscall_64/kernel", "run/"}; !slices.Equal(got, w) {
		t.Fatalf("diff nodes %q, want %q", got, w)
	}
}
