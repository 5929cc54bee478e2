package uitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
	"github.com/stackstream/stackstream/services/query/internal/server"
	"github.com/stackstream/stackstream/services/query/ui"
)

const uiDir = "../ui"

// browserDeps returns node and chromium, skipping (failing under CI=true)
// when either is missing, and installs the UI's npm packages when needed.
func browserDeps(t *testing.T) (node, chromium string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node for the browser tests: %v (install Node.js 20+)", err)
	}
	chromium = os.Getenv("STACKSTREAM_TEST_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		testenv.Unavailable(t, "chromium for the browser tests at %s: %v (apt-get install chromium, or set STACKSTREAM_TEST_CHROMIUM)", chromium, err)
	}
	if _, err := os.Stat(filepath.Join(uiDir, "node_modules", "playwright-core")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			testenv.Unavailable(t, "npm to install the UI's packages: %v", err)
		}
		run(t, 5*time.Minute, uiDir, nil, npm, "ci", "--no-audit", "--no-fund")
	}
	return node, chromium
}

// run runs a command in dir, logging its output, and fails t if it fails.
func run(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out.String())
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
}

func artifactsDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("artifacts", name))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBrowser loads the UI from the real server over the querytest fixture
// and walks through it: charts, drag-to-zoom, a preset range, the flame graph
// (hover, click to zoom, highlight), the top table and sandwich view, keyword
// search with the function's trend, both diffs, a readable API error and
// selector completion. Screenshots go to artifacts/browser.
func TestBrowser(t *testing.T) {
	node, chromium := browserDeps(t)
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.Fixture(names, time.Now()))

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.New(cl, names, server.Options{
		API: api.Options{Now: time.Now, Version: "uitest"},
		UI:  ui.Handler(),
	}, nil, logger))
	defer srv.Close()

	expect, _ := json.Marshal(map[string]string{
		"hot":     "main.work", // the largest self value of the fixture (querytest.FixtureWorkSelf)
		"keyword": "work",
		"base":    `{service="db"}`,
		"compare": `{service="checkout"}`,
	})
	run(t, 5*time.Minute, uiDir, []string{
		"CHROMIUM=" + chromium,
		"UI_ARTIFACTS=" + artifactsDir(t, "browser"),
		"UI_EXPECT=" + string(expect),
	}, node, "tests/ui.spec.mjs", srv.URL)
}

// TestBrowserEmpty checks the empty states over indices without documents.
func TestBrowserEmpty(t *testing.T) {
	node, chromium := browserDeps(t)
	cl, names := querytest.Setup(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.New(cl, names, server.Options{
		API: api.Options{Now: time.Now, Version: "uitest"},
		UI:  ui.Handler(),
	}, nil, logger))
	defer srv.Close()
	run(t, 3*time.Minute, uiDir, []string{
		"CHROMIUM=" + chromium,
		"UI_ARTIFACTS=" + artifactsDir(t, "empty"),
	}, node, "tests/empty.spec.mjs", srv.URL)
}

// TestBrowserAuth checks that with a token required the UI says so in
// readable words, offers a token field, and loads once the token is typed.
func TestBrowserAuth(t *testing.T) {
	node, chromium := browserDeps(t)
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.Fixture(names, time.Now()))

	const token = "s3cret-uitest"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The real server: with a token alone it serves the UI's files openly
	// (a page load cannot carry a Bearer token) and keeps the API behind it.
	mux := server.New(cl, names, server.Options{
		API:       api.Options{Now: time.Now, Version: "uitest"},
		AuthToken: token,
		UI:        ui.Handler(),
	}, nil, logger)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	run(t, 3*time.Minute, uiDir, []string{
		"CHROMIUM=" + chromium,
		"UI_ARTIFACTS=" + artifactsDir(t, "auth"),
		"UI_TOKEN=" + token,
	}, node, "tests/auth.spec.mjs", srv.URL)
}

// TestUnit runs the UI's unit tests (flame graph layout, hit testing,
// sandwich, search matching, time ranges, selector completion) with node's
// test runner.
func TestUnit(t *testing.T) {
	browserDeps(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Unavailable(t, "npm to run the UI's unit tests: %v", err)
	}
	run(t, 3*time.Minute, uiDir, nil, npm, "run", "test:unit")
}

// TestDistIsCurrent rebuilds the UI and compares it with the committed,
// embedded dist/, so a source change without `npm run build` fails here
// instead of shipping a stale UI.
func TestDistIsCurrent(t *testing.T) {
	browserDeps(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Unavailable(t, "npm to build the UI: %v", err)
	}
	out := t.TempDir()
	run(t, 5*time.Minute, uiDir, nil, npm, "run", "build", "--", "--outDir", out, "--emptyOutDir")
	built := readTree(t, os.DirFS(out))
	committed := readTree(t, os.DirFS(filepath.Join(uiDir, "dist")))
	for name, b := range built {
		c, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("dist/%s is missing: run npm run build in services/query/ui and commit dist/", name)
		case !bytes.Equal(b, c):
			t.Errorf("dist/%s differs from a fresh build: run npm run build and commit dist/", name)
		}
	}
	for name := range committed {
		if _, ok := built[name]; !ok {
			t.Errorf("dist/%s is stale (a fresh build does not produce it): run npm run build and commit dist/", name)
		}
	}
}

func readTree(t *testing.T, fsys fs.FS) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		files[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestBrowserKinds loads the UI over querytest.KindsFixture, stacks mixing
// native, kernel, Python, Java, JS and JIT frames: the legend and the
// frames' colors differ per kind and the tooltip names it. Screenshots go to
// artifacts/kinds.
func TestBrowserKinds(t *testing.T) {
	node, chromium := browserDeps(t)
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.KindsFixture(names, time.Now()))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.New(cl, names, server.Options{
		API: api.Options{Now: time.Now, Version: "uitest"},
		UI:  ui.Handler(),
	}, nil, logger))
	defer srv.Close()
	run(t, 3*time.Minute, uiDir, []string{
		"CHROMIUM=" + chromium,
		"UI_ARTIFACTS=" + artifactsDir(t, "kinds"),
	}, node, "tests/kinds.spec.mjs", srv.URL)
}

// TestBrowserFleet loads the UI over querytest.FleetFixture (200 hosts):
// grouped per host, the CPU chart shows the top 10 and one grey "other"
// legend entry, and says how many hosts it folded. Screenshots go to
// artifacts/fleet.
func TestBrowserFleet(t *testing.T) {
	node, chromium := browserDeps(t)
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.FleetFixture(names, time.Now(), 200))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.New(cl, names, server.Options{
		API: api.Options{Now: time.Now, Version: "uitest"},
		UI:  ui.Handler(),
	}, nil, logger))
	defer srv.Close()
	run(t, 3*time.Minute, uiDir, []string{
		"CHROMIUM=" + chromium,
		"UI_ARTIFACTS=" + artifactsDir(t, "fleet"),
	}, node, "tests/fleet.spec.mjs", srv.URL)
}
