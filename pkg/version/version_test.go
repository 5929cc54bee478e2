package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	old := Version
	Version = "v9.8.7"
	defer func() { Version = old }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	want := `# HELP stackstream_build_info The running binary's release, source revision and Go version (always 1).
# TYPE stackstream_build_info gauge
stackstream_build_info{go_version="` + goVersion() + `",revision="` + Revision() + `",version="v9.8.7"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stackstream_build_info"); err != nil {
		t.Error(err)
	}
	if l := Line(); !strings.Contains(l, "v9.8.7") || !strings.Contains(l, "revision") {
		t.Errorf("Line() = %q", l)
	}
}

func goVersion() string { return runtime.Version() }
