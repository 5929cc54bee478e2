package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestPprofExportLines downloads exports of querytest.LinesFixture from the
// API over the real OpenSearch and reads them with the real go tool pprof:
// -lines -top and -list need the functions' files and the locations' lines.
func TestPprofExportLines(t *testing.T) {
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.LinesFixture(names, now))
	base := serve(t, cl, names, api.Options{})
	dir := t.TempDir()

	download := func(t *testing.T, service string) (string, *profile.Profile) {
		t.Helper()
		u := base + "/api/v1/pprof?" + url.Values{"query": {fmt.Sprintf(`{service=%q}`, service)}, "from": {"now-1h"}}.Encode()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d %v: %s", u, resp.StatusCode, err, body)
		}
		file := filepath.Join(dir, service+".pb.gz")
		if err := os.WriteFile(file, body, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := profile.ParseData(body)
		if err != nil {
			t.Fatalf("parse export: %v", err)
		}
		return file, p
	}
	pprof := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"tool", "pprof"}, args...)...)
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("go tool pprof %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	file, p := download(t, querytest.LinesService)

	t.Run("mappings, totals and labels", func(t *testing.T) {
		if err := p.CheckValid(); err != nil {
			t.Fatal(err)
		}
		var mappings []string
		for _, m := range p.Mapping {
			mappings = append(mappings, m.File)
		}
		slices.Sort(mappings)
		if want := []string{"[kernel.kallsyms]", "[python]", "demo", "libpython3.12.so.1.0"}; !slices.Equal(mappings, want) {
			t.Errorf("mappings %q, want %q", mappings, want)
		}
		var total int64
		byHost := map[string]int64{}
		for _, s := range p.Sample {
			total += s.Value[0]
			if s.Label["service"][0] != querytest.LinesService {
				t.Errorf("sample labels %v, want service %s", s.Label, querytest.LinesService)
			}
			byHost[s.Label["host"][0]] += s.Value[0]
		}
		if total != querytest.LinesTotal || byHost["demo-1"] != 350 || byHost["demo-2"] != 100 {
			t.Errorf("total %d by host %v, want %d: demo-1 350, demo-2 100", total, byHost, querytest.LinesTotal)
		}
	})

	t.Run("pprof -lines -top", func(t *testing.T) {
		out := pprof(t, "-lines", "-top", file)
		for _, row := range []string{
			`300ns .* main\.work /src/demo/work\.go:5$`,
			`100ns .* main\.work /src/demo/work\.go:7$`,
			`50ns .* sys_read$`,
			`0 .* 450ns .* main\.main /src/demo/main\.go:8$`,
			`0 .* 50ns .* Handler\.serve /srv/handler\.py:30$`,
		} {
			if !regexp.MustCompile(`(?m)` + row).MatchString(out) {
				t.Errorf("no row matching %q", row)
			}
		}
		if first := firstTopRow(out); !strings.HasSuffix(first, "work.go:5") {
			t.Errorf("first row %q, want main.work at work.go:5", first)
		}
	})

	t.Run("pprof -tagfocus host", func(t *testing.T) {
		out := pprof(t, "-top", "-tagfocus=host=demo-2", file)
		if !strings.Contains(out, "accounting for 100ns, 22.22% of 450ns total") || !strings.HasSuffix(firstTopRow(out), "main.work") {
			t.Errorf("-tagfocus=host=demo-2 should leave main.work's 100ns of 450ns")
		}
	})

	t.Run("pprof -list with the source", func(t *testing.T) {
		src := t.TempDir()
		lines := []string{"package main", "", "func work(n int) {", "\tfor i := range n {", "\t\tsum += i * i", "\t}", "\tsum = sum % 7", "}"}
		if err := os.WriteFile(filepath.Join(src, "work.go"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := pprof(t, "-list", `main\.work`, "-source_path", src, "-trim_path", "/src/demo", file)
		for _, row := range []string{
			`ROUTINE =+ main\.work in work\.go`, // trimmed
			`400ns +400ns \(flat, cum\)`,
			`300ns +300ns +5:\t\tsum \+= i \* i`,
			`100ns +100ns +7:\tsum = sum % 7`,
			`\. +\. +4:\tfor i := range n \{`,
		} {
			if !regexp.MustCompile(row).MatchString(out) {
				t.Errorf("no line matching %q", row)
			}
		}
	})

	t.Run("MAX_STACKS keeps the heaviest stack with its labels", func(t *testing.T) {
		one := serve(t, cl, names, api.Options{MaxStacks: 1})
		resp, err := http.Get(one + "/api/v1/pprof?" + url.Values{"query": {`{service="demo"}`}, "from": {"now-1h"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X-Stackstream-Truncated") != "true" {
			t.Error("no X-Stackstream-Truncated header")
		}
		var got []string
		for _, s := range p.Sample {
			got = append(got, fmt.Sprintf("%s %v %d", s.Location[0].Line[0].Function.Name, s.Label["host"], s.Value[0]))
		}
		slices.Sort(got)
		if want := []string{"[other] [] 150", "main.work [demo-1] 300"}; !slices.Equal(got, want) {
			t.Errorf("samples %q, want %q", got, want)
		}
	})

	t.Run("no labels past 16 hosts", func(t *testing.T) {
		_, p := download(t, querytest.LinesWideService)
		var total int64
		for _, s := range p.Sample {
			total += s.Value[0]
			if len(s.Label) > 0 {
				t.Errorf("sample labelled %v in an export of %d hosts", s.Label, querytest.LinesWideHosts)
			}
		}
		if total != querytest.LinesWideTotal || len(p.Sample) != 1 {
			t.Errorf("total %d in %d samples, want %d in one", total, len(p.Sample), querytest.LinesWideTotal)
		}
	})
}
