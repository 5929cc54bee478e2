package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// now is the fixed clock of the fixture tests.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fixtureServer indexes the querytest fixture and returns a function
// serving the API over it with the given options.
func fixtureServer(t *testing.T) func(api.Options) string {
	t.Helper()
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.Fixture(names, now))
	return func(opts api.Options) string { return serve(t, cl, names, opts) }
}

// serve serves the API over cl and names, at the clock now, until the test
// ends, and returns its base URL.
func serve(t testing.TB, cl *opensearchapi.Client, names indices.Names, opts api.Options) string {
	t.Helper()
	opts.Now = func() time.Time { return now }
	srv := httptest.NewServer(api.New(cl, names, opts, slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, base, path string, params url.Values, out any) int {
	t.Helper()
	u := base + path
	if params != nil {
		u += "?" + params.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: HTTP %d: decode %q: %v", u, resp.StatusCode, body, err)
		}
	}
	if resp.StatusCode != http.StatusOK && out != nil {
		if _, isErr := out.(*errorBody); !isErr {
			t.Fatalf("GET %s: HTTP %d: %s", u, resp.StatusCode, body)
		}
	}
	return resp.StatusCode
}

type errorBody struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter"`
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestAPI runs every endpoint over one fixture (indexing it once keeps the
// module's test time short on the shared node).
func TestAPI(t *testing.T) {
	serve := fixtureServer(t)
	base := serve(api.Options{})

	t.Run("series cpu by service", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", url.Values{"type": {"cpu"}, "step": {"5m"}, "group_by": {"service"}}, &s)
		if s.Unit != "cores" || s.StepSeconds != 300 || s.Source != "rollups" {
			t.Fatalf("unit %q step %d source %q, want cores 300 rollups", s.Unit, s.StepSeconds, s.Source)
		}
		want := map[string]float64{"checkout": querytest.FixtureWeb1Cores + querytest.FixtureWeb2Cores, "db": querytest.FixtureDB1Cores}
		if len(s.Series) != 2 || s.Series[0].Labels["service"] != "db" {
			t.Fatalf("series %+v, want db then checkout", s.Series)
		}
		for _, ser := range s.Series {
			if len(ser.Points) != 12 {
				t.Fatalf("%v: %d points, want 12", ser.Labels, len(ser.Points))
			}
			for _, p := range ser.Points {
				if !near(p[1], want[ser.Labels["service"]]) {
					t.Fatalf("%v at %v: %v cores, want %v", ser.Labels, time.UnixMilli(int64(p[0])), p[1], want[ser.Labels["service"]])
				}
			}
			if first := time.UnixMilli(int64(ser.Points[0][0])).UTC(); !first.Equal(now.Add(-time.Hour)) {
				t.Fatalf("first point at %v, want %v", first, now.Add(-time.Hour))
			}
		}
	})

	t.Run("series cpu by host with selector", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", url.Values{"query": {`{service="checkout",host=~"web-.*"}`}, "step": {"60"}, "group_by": {"host"}}, &s)
		if len(s.Series) != 2 || s.Series[0].Labels["host"] != "web-2" || len(s.Series[0].Points) != 60 {
			t.Fatalf("series %+v, want web-2 then web-1 with 60 points", s.Series)
		}
		if p := s.Series[1].Points[7][1]; !near(p, querytest.FixtureWeb1Cores) {
			t.Fatalf("web-1: %v cores, want %v", p, querytest.FixtureWeb1Cores)
		}
	})

	t.Run("series automatic step", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", url.Values{"group_by": {"host"}}, &s)
		if s.StepSeconds != 60 || len(s.Series) != 3 || len(s.Series[0].Points) != 60 || s.Series[0].Labels["host"] != "db-1" {
			t.Fatalf("step %d, %d series, want 60 s and db-1, web-2, web-1 with 60 points", s.StepSeconds, len(s.Series))
		}
	})

	t.Run("series memory", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", url.Values{"type": {"memory"}, "step": {"10m"}}, &s)
		if s.Unit != "bytes" || len(s.Series) != 1 || len(s.Series[0].Points) != 6 {
			t.Fatalf("memory series %+v, want one checkout series of 6 points in bytes", s)
		}
		if p := s.Series[0].Points[0][1]; !near(p, 2*querytest.FixtureMemBytes) {
			t.Fatalf("checkout memory %v, want %v", p, 2*querytest.FixtureMemBytes)
		}
	})

	t.Run("series of whole hours reads hourly rollups", func(t *testing.T) {
		var s api.SeriesResponse
		// Ending an hour ago: the hour just ended would be read from its
		// minute windows, since its hourly documents may not be written yet.
		get(t, base, "/api/v1/series", url.Values{"from": {"now-24h"}, "to": {"now-1h"}, "step": {"1h"}}, &s)
		if s.Source != "rollups" || len(s.Series) != 1 || len(s.Series[0].Points) != 1 {
			t.Fatalf("series %+v, want the one hourly checkout window", s)
		}
		p := s.Series[0].Points[0]
		if !time.UnixMilli(int64(p[0])).Equal(now.Add(-23*time.Hour)) || !near(p[1], querytest.FixtureLongServiceTotal/float64(time.Hour)) {
			t.Fatalf("point %v, want [%v, %v]", p, now.Add(-23*time.Hour), querytest.FixtureLongServiceTotal/float64(time.Hour))
		}
	})

	t.Run("series of one function", func(t *testing.T) {
		var s api.SeriesResponse
		// web-2's documents also hold main.idle, which must not count.
		get(t, base, "/api/v1/series", url.Values{"function": {"main.work"}, "step": {"10m"}}, &s)
		if s.Source != "samples" || len(s.Series) != 1 || s.Series[0].Labels["function"] != "main.work" || len(s.Series[0].Points) != 2 {
			t.Fatalf("function series %+v", s)
		}
		// Compared in nanoseconds: near's absolute tolerance would accept
		// any value of nanoseconds per 10 minutes as cores.
		step := float64(10 * time.Minute)
		want := [][2]float64{
			{float64(now.Add(-50 * time.Minute).UnixMilli()), 1200},
			{float64(now.Add(-20 * time.Minute).UnixMilli()), 600},
		}
		for i, p := range s.Series[0].Points {
			if p[0] != want[i][0] || !near(p[1]*step, want[i][1]) {
				t.Fatalf("point %d = [%v, %v ns], want %v", i, p[0], p[1]*step, want[i])
			}
		}
		get(t, base, "/api/v1/series", url.Values{"function": {querytest.FixtureLongFunction}, "from": {"now-24h"}, "step": {"1h"}}, &s)
		if s.Source != "rollups" || len(s.Series) != 1 || len(s.Series[0].Points) != 1 ||
			!near(s.Series[0].Points[0][1], querytest.FixtureLongFunctionTotal/float64(time.Hour)) {
			t.Fatalf("function series over a day %+v", s)
		}
		get(t, base, "/api/v1/series", url.Values{"function": {"no.such"}}, &s)
		if len(s.Series) != 1 || len(s.Series[0].Points) != 0 {
			t.Fatalf("series of an unknown function %+v, want one empty line", s)
		}
	})

	t.Run("series from samples for label selectors", func(t *testing.T) {
		var s api.SeriesResponse
		get(t, base, "/api/v1/series", url.Values{"query": {`{k8s_pod="checkout-abc"}`}, "step": {"30m"}}, &s)
		if s.Source != "samples" || len(s.Series) != 1 {
			t.Fatalf("series %+v, want one series from samples", s)
		}
		var sum float64
		for _, p := range s.Series[0].Points {
			sum += p[1] * float64(30*time.Minute)
		}
		if !near(sum, querytest.FixtureWeb1Total) {
			t.Fatalf("cores x step summed to %v ns, want %v", sum, querytest.FixtureWeb1Total)
		}
	})

	t.Run("flamegraph", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"type": {"cpu"}}, &f)
		if f.Total != querytest.FixtureTotal || f.Root.Total != querytest.FixtureTotal || f.Truncated || f.Source != "samples" {
			t.Fatalf("total %d root %d truncated %v source %s, want %d from samples", f.Total, f.Root.Total, f.Truncated, f.Source, querytest.FixtureTotal)
		}
		mainNode := f.Root.Children[0]
		if len(f.Root.Children) != 1 || mainNode.Name != "main.main" || mainNode.Total != querytest.FixtureTotal {
			t.Fatalf("root children %+v, want main.main only", f.Root.Children)
		}
		var got []string
		for _, c := range mainNode.Children {
			got = append(got, c.Name)
		}
		if strings.Join(got, ",") != "main.work,db.query,main.idle" {
			t.Fatalf("main.main children %v, want main.work,db.query,main.idle (by total)", got)
		}
		work := mainNode.Children[0]
		if work.Total != querytest.FixtureWorkTotal || work.Self != querytest.FixtureWorkSelf || work.Children[0].Name != "runtime.memmove" || work.Children[0].Self != querytest.FixtureMemmoveSelf {
			t.Fatalf("main.work node %+v", work)
		}
	})

	t.Run("flamegraph with selectors", func(t *testing.T) {
		for q, want := range map[string]int64{
			`{service="checkout"}`:                         querytest.FixtureCheckoutTotal,
			`{host="web-1"}`:                               querytest.FixtureWeb1Total,
			`{k8s_pod=~"checkout-d.*"}`:                    querytest.FixtureWeb2Total,
			`{service="checkout",k8s_pod!="checkout-abc"}`: querytest.FixtureWeb2Total,
			`{service="nope"}`:                             0,
		} {
			var f api.FlamegraphResponse
			get(t, base, "/api/v1/flamegraph", url.Values{"query": {q}}, &f)
			if f.Total != want {
				t.Errorf("%s: total %d, want %d", q, f.Total, want)
			}
		}
	})

	t.Run("flamegraph max_nodes", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"max_nodes": {"2"}}, &f)
		// Folding nodes below max_nodes loses nothing: not truncated.
		if f.Truncated || f.Folded == 0 || f.Root.Total != querytest.FixtureTotal {
			t.Fatalf("truncated %v folded %d total %d, want folded nodes with the total kept", f.Truncated, f.Folded, f.Root.Total)
		}
		kids := f.Root.Children[0].Children
		if len(kids) != 2 || kids[0].Name != "main.work" || kids[1].Name != "[other]" || kids[1].Total != querytest.FixtureQuerySelf+querytest.FixtureIdleSelf {
			t.Fatalf("children %+v, want main.work and [other]", kids)
		}
	})

	t.Run("flamegraph takes each stack out of packed documents", func(t *testing.T) {
		// web-2's documents each hold main.work and main.idle.
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"query": {`{host="web-2"}`}}, &f)
		kids := f.Root.Children[0].Children
		if f.Total != querytest.FixtureWeb2Total || len(kids) != 2 || kids[0].Name != "main.work" || kids[0].Total != 600 || kids[1].Name != "main.idle" || kids[1].Total != 200 {
			t.Fatalf("total %d, main.main children %+v, want main.work 600 and main.idle 200", f.Total, kids)
		}
	})

	t.Run("flamegraph pages through rollup stacks", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, serve(api.Options{PageSize: 1}), "/api/v1/flamegraph", url.Values{"from": {now.Add(-24*time.Hour - 30*time.Minute).Format(time.RFC3339)}, "to": {"now"}}, &f)
		if f.Source != "rollups" || f.Total != querytest.FixtureLongTotal || f.Truncated || f.Root.Children[0].Children[0].Total != querytest.FixtureLongTotal {
			t.Fatalf("paged one stack at a time: source %s total %d truncated %v children %+v", f.Source, f.Total, f.Truncated, f.Root.Children[0].Children)
		}
	})

	t.Run("flamegraph keeps the heaviest stacks past max stacks", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, serve(api.Options{MaxStacks: 2}), "/api/v1/flamegraph", nil, &f)
		if f.Total != querytest.FixtureTotal || !f.Truncated {
			t.Fatalf("total %d truncated %v, want %d truncated", f.Total, f.Truncated, querytest.FixtureTotal)
		}
		// The two heaviest stacks: main.main>main.work (1500) and main.main>db.query (1000).
		var got []string
		for _, c := range f.Root.Children {
			got = append(got, c.Name)
		}
		kids := f.Root.Children[0].Children
		if strings.Join(got, ",") != "main.main,[other]" || f.Root.Children[1].Total != 500 ||
			len(kids) != 2 || kids[0].Name != "main.work" || kids[0].Total != 1500 || kids[1].Name != "db.query" {
			t.Fatalf("root children %v (%+v), main.main children %+v", got, f.Root.Children, kids)
		}
	})

	t.Run("flamegraph of stack-less memory samples", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"type": {"memory"}}, &f)
		if f.Unit != "bytes" || f.Total != querytest.FixtureMemBytes || len(f.Root.Children) != 1 || f.Root.Children[0].Name != "[no stack]" {
			t.Fatalf("memory flame graph %+v, want one [no stack] node of %d bytes", f, querytest.FixtureMemBytes)
		}
	})

	t.Run("flamegraph over a day reads rollups", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"from": {now.Add(-24*time.Hour - 30*time.Minute).Format(time.RFC3339)}, "to": {"now"}}, &f)
		if f.Source != "rollups" || f.Total != querytest.FixtureLongTotal {
			t.Fatalf("source %s total %d, want rollups %d", f.Source, f.Total, querytest.FixtureLongTotal)
		}
		work := f.Root.Children[0].Children[0]
		if work.Name != "main.work" || work.Self != 50 || work.Children[0].Total != 1000 {
			t.Fatalf("main.work %+v, want self 50 and runtime.memmove 1000", work)
		}
	})

	t.Run("top", func(t *testing.T) {
		var top api.TopResponse
		get(t, base, "/api/v1/top", url.Values{"limit": {"3"}}, &top)
		if top.Total != querytest.FixtureTotal || len(top.Functions) != 3 {
			t.Fatalf("top %+v", top)
		}
		f := top.Functions[0]
		if f.Name != "main.work" || f.Self != querytest.FixtureWorkSelf || f.Total != querytest.FixtureWorkTotal || !near(f.SelfShare, 0.5) || !near(f.TotalShare, 0.6) {
			t.Fatalf("first function %+v, want main.work self 1500 (0.5) total 1800 (0.6)", f)
		}
		if top.Functions[1].Name != "db.query" || top.Functions[2].Name != "runtime.memmove" {
			t.Fatalf("functions %+v, want main.work, db.query, runtime.memmove", top.Functions)
		}
	})

	t.Run("search", func(t *testing.T) {
		var s api.SearchResponse
		get(t, base, "/api/v1/search", url.Values{"q": {"WORK"}}, &s)
		if len(s.Results) != 1 || s.Results[0].Kind != "function" || s.Results[0].Name != "main.work" || !near(s.Results[0].Share, 0.6) {
			t.Fatalf("search WORK: %+v, want main.work 0.6", s.Results)
		}
		get(t, base, "/api/v1/search", url.Values{"q": {"check"}}, &s)
		want := []api.SearchResult{
			{Kind: "service", Name: "checkout", Share: 2.0 / 3},
			{Kind: "label", Label: "comm", Name: "checkout", Share: 2.0 / 3},
			{Kind: "label", Label: "k8s_pod", Name: "checkout-abc", Share: 0.4},
			{Kind: "label", Label: "k8s_pod", Name: "checkout-def", Share: 800.0 / 3000},
		}
		if len(s.Results) != len(want) {
			t.Fatalf("search check: %+v, want %+v", s.Results, want)
		}
		for i, r := range s.Results {
			if r.Kind != want[i].Kind || r.Label != want[i].Label || r.Name != want[i].Name || !near(r.Share, want[i].Share) {
				t.Fatalf("search check result %d: %+v, want %+v", i, r, want[i])
			}
		}
		get(t, base, "/api/v1/search", url.Values{"q": {"web-2"}}, &s)
		if len(s.Results) != 1 || s.Results[0].Kind != "host" || !near(s.Results[0].Share, 800.0/3000) {
			t.Fatalf("search web-2: %+v", s.Results)
		}
		get(t, base, "/api/v1/search", url.Values{"q": {"*"}}, &s)
		if len(s.Results) != 0 {
			t.Fatalf("search * matched %+v: wildcards must be literal", s.Results)
		}
	})

	t.Run("search past max stacks counts every stack", func(t *testing.T) {
		// One stack per chunk: main.work's two stacks (its self and
		// runtime.memmove under it) and main.idle's, the lightest, all count.
		small := serve(api.Options{MaxStacks: 1})
		for _, c := range []struct {
			q, name string
			share   float64
		}{
			{"work", "main.work", float64(querytest.FixtureWorkTotal) / querytest.FixtureTotal},
			{"idle", "main.idle", float64(querytest.FixtureIdleSelf) / querytest.FixtureTotal},
		} {
			var s api.SearchResponse
			get(t, small, "/api/v1/search", url.Values{"q": {c.q}}, &s)
			if len(s.Results) != 1 || s.Results[0].Name != c.name || !near(s.Results[0].Share, c.share) {
				t.Fatalf("search %s at MaxStacks 1: %+v, want %s %.3f", c.q, s.Results, c.name, c.share)
			}
		}
	})

	t.Run("search over a day reads function rollups", func(t *testing.T) {
		var s api.SearchResponse
		get(t, base, "/api/v1/search", url.Values{"q": {"legacy"}, "from": {"now-24h"}}, &s)
		if len(s.Results) != 1 || s.Results[0].Name != querytest.FixtureLongFunction || s.Results[0].Share <= 0 {
			t.Fatalf("search legacy: %+v", s.Results)
		}
	})

	t.Run("diff", func(t *testing.T) {
		var d api.DiffResponse
		get(t, base, "/api/v1/diff", url.Values{"base": {`{host="web-1"}`}, "compare": {`{host="web-2"}`}}, &d)
		if d.BaseTotal != querytest.FixtureWeb1Total || d.CompareTotal != querytest.FixtureWeb2Total || d.Root.Base != 1 || d.Root.Compare != 1 {
			t.Fatalf("diff totals %+v", d)
		}
		work := d.Root.Children[0].Children[0]
		// web-1: main.work 1200/1200; web-2: main.work 600/800.
		if work.Name != "main.work" || !near(work.Base, 1) || !near(work.Compare, 0.75) {
			t.Fatalf("main.work %+v, want base 1 compare 0.75", work)
		}
		idle := d.Root.Children[0].Children[1]
		if idle.Name != "main.idle" || idle.Base != 0 || !near(idle.Compare, 0.25) {
			t.Fatalf("main.idle %+v, want base 0 compare 0.25", idle)
		}
	})

	t.Run("diff of two ranges", func(t *testing.T) {
		var d api.DiffResponse
		get(t, base, "/api/v1/diff", url.Values{
			"base_from": {"now-1h"}, "base_to": {"now-30m"}, "compare_from": {"now-30m"}, "compare_to": {"now"},
		}, &d)
		if d.BaseTotal != 2000 || d.CompareTotal != 1000 {
			t.Fatalf("totals %d %d, want 2000 1000", d.BaseTotal, d.CompareTotal)
		}
	})

	t.Run("labels", func(t *testing.T) {
		var l api.LabelsResponse
		get(t, base, "/api/v1/labels", nil, &l)
		if strings.Join(l.Labels, ",") != "comm,host,k8s_pod,service" {
			t.Fatalf("labels %v", l.Labels)
		}
		var v api.LabelValuesResponse
		get(t, base, "/api/v1/labels/k8s_pod/values", nil, &v)
		if v.Label != "k8s_pod" || strings.Join(v.Values, ",") != "checkout-abc,checkout-def,db-0" {
			t.Fatalf("k8s_pod values %+v", v)
		}
		get(t, base, "/api/v1/labels/host/values", url.Values{"query": {`{service="db"}`}}, &v)
		if strings.Join(v.Values, ",") != "db-1" {
			t.Fatalf("host values of db %+v", v)
		}
	})

	t.Run("pprof opens in go tool pprof", func(t *testing.T) {
		resp, err := http.Get(base + "/api/v1/pprof?" + url.Values{"query": {`{service="checkout"}`}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("parse exported profile: %v", err)
		}
		var total int64
		for _, s := range p.Sample {
			total += s.Value[0]
		}
		if total != querytest.FixtureCheckoutTotal || p.SampleType[0].Unit != "nanoseconds" {
			t.Fatalf("profile total %d unit %s, want %d nanoseconds", total, p.SampleType[0].Unit, querytest.FixtureCheckoutTotal)
		}

		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(goBin, "tool", "pprof", "-top", base+"/api/v1/pprof?"+url.Values{"from": {"now-1h"}}.Encode())
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top: %v\n%s", err, out)
		}
		t.Logf("go tool pprof -top:\n%s", out)
		first := firstTopRow(string(out))
		if !strings.HasSuffix(first, "main.work") {
			t.Fatalf("first row of go tool pprof -top is %q, want main.work:\n%s", first, out)
		}
	})
}

// firstTopRow returns the first function row of `pprof -top` output (after
// the "flat  flat%" header).
func firstTopRow(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}
