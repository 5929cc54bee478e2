// Package version is the release every stackstream binary reports: in -h,
// in /metrics (stackstream_build_info) and, for the query service, in its
// API and UI. `make build` and `make release` set it at link time:
//
//	go build -ldflags "-X github.com/stackstream/stackstream/pkg/version.Version=v1.2.3 \
//	    -X github.com/stackstream/stackstream/pkg/version.Commit=0123456789ab"
package version

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release, "dev" for a build without one.
var Version = "dev"

// Commit is the source's commit when the build set it.
var Commit = ""

// Revision is the source's commit: Commit, else as the go command stamped it
// (-buildvcs), with "+dirty" for a modified tree; "unknown" without either.
func Revision() string {
	if Commit != "" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// Line describes the running binary in one line: its name, release,
// revision and Go version.
func Line() string {
	return fmt.Sprintf("%s %s (revision %s, %s, %s/%s)", filepath.Base(os.Args[0]), Version, Revision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Collector exports stackstream_build_info, constant 1, labelled with the
// release, revision and Go version.
func Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stackstream_build_info",
		Help: "The running binary's release, source revision and Go version (always 1).",
		ConstLabels: prometheus.Labels{
			"version": Version, "revision": Revision(), "go_version": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}
