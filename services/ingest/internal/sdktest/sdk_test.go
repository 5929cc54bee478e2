package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// pyroscopeIOVersion is the pyroscope-io release the test installs.
const pyroscopeIOVersion = "1.4.0"

// TestGoSDK: the Go SDK pushes CPU and heap profiles of a program burning
// CPU in one function; the records on profiles.raw carry the application
// name as service, the SDK's tags as labels, the hostname tag as key, and
// the hot function.
func TestGoSDK(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) {
		o.Auth = server.NewAuth(map[string]string{"sdk-token": "team-go"}, "", "")
	})
	bin := filepath.Join(t.TempDir(), "gosdk")
	// Its own module, outside the workspace: the service does not depend on the SDK.
	testenv.Run(t, "../../testdata/gosdk", []string{"GOWORK=off", "GOFLAGS=-mod=readonly"}, "go", "build", "-o", bin, ".")
	out, err := exec.Command(bin, "-server", env.URL, "-app", "sdkapp", "-user", "tenant", "-password", "sdk-token", "-for", "3s").CombinedOutput()
	if err != nil {
		t.Fatalf("gosdk: %v\n%s", err, out)
	}
	recs := env.ReadAll(t, 30*time.Second)
	types := map[record.ProfileType]int{}
	hot := false
	for _, r := range recs {
		types[r.Meta.Type]++
		if r.Meta.Type == record.ProfileCPU {
			var cpu int64
			for _, s := range r.Profile.Sample {
				cpu += s.Value[len(s.Value)-1]
			}
			t.Logf("cpu record at %s for %s: %s of CPU, %d samples", time.Unix(0, r.Profile.TimeNanos).Format(time.TimeOnly+".000"), time.Duration(r.Profile.DurationNanos), time.Duration(cpu), len(r.Profile.Sample))
		}
		if r.Key != "gosdk-host" || r.Meta.Host != "gosdk-host" || r.Meta.AgentVersion != "pyroscope/gospy" {
			t.Errorf("record key %q meta %+v", r.Key, r.Meta)
		}
		for k, want := range map[string]string{"service": "sdkapp", "env": "test", "tenant": "team-go", "process_runtime_name": "go"} {
			if got := ingesttest.Label(r.Profile, k); got != want {
				t.Errorf("%s record: label %s = %q, want %q", r.Meta.Type, k, got, want)
			}
		}
		if ingesttest.Label(r.Profile, "session_id") == "" {
			t.Errorf("%s record has no session_id label", r.Meta.Type)
		}
		if r.Meta.Type == record.ProfileCPU && ingesttest.Functions(r.Profile)["main.stackstreamHotFunction"] {
			hot = true
			for _, loc := range r.Profile.Location {
				if len(loc.Line) > 0 && loc.Mapping != nil && !loc.Mapping.HasFunctions {
					t.Errorf("mapping %s of named frames not marked HasFunctions", loc.Mapping.File)
				}
			}
		}
	}
	t.Logf("records by type: %v", types)
	if !hot {
		t.Fatalf("no cpu record holds main.stackstreamHotFunction (%d records: %v)", len(recs), types)
	}
	if types[record.ProfileHeap] == 0 || types[record.ProfileAlloc] == 0 {
		t.Errorf("no heap or alloc records from the SDK's heap profiles: %v", types)
	}
}

// TestPythonSDK: pyroscope-io from PyPI, in a virtualenv, pushes a CPU
// profile of a Python function burning CPU, authenticated with a tenant's
// token as its basic auth password.
func TestPythonSDK(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) {
		o.Auth = server.NewAuth(map[string]string{"py-token": "team-py"}, "", "")
	})
	python, err := exec.LookPath("python3")
	if err != nil {
		testenv.Unavailable(t, "python3: %v", err)
	}
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	testenv.Run(t, dir, nil, python, "-m", "venv", venv)
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", "pyroscope-io=="+pyroscopeIOVersion)
	if out, err := pip.CombinedOutput(); err != nil {
		// No wheel for this platform, or no package index.
		testenv.Unavailable(t, "pip install pyroscope-io==%s: %v\n%s", pyroscopeIOVersion, err, out)
	}
	script := filepath.Join(dir, "push.py")
	os.WriteFile(script, []byte(`import sys, time
import pyroscope

def stackstream_hot_function(until):
    x = 0
    while time.time() < until:
        x += 1
    return x

pyroscope.configure(application_name="pyapp", server_address=sys.argv[1], upload_interval=1,
                    basic_auth_username="any", basic_auth_password="py-token",
                    tags={"hostname": "py-host", "env": "test"}, enable_logging=True)
stackstream_hot_function(time.time() + 4)
pyroscope.shutdown()
print("ok")
`), 0o644)
	out, err := exec.Command(filepath.Join(venv, "bin", "python"), script, env.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	recs := env.ReadAll(t, 30*time.Second)
	hot := false
	for _, r := range recs {
		if r.Key != "py-host" || r.Meta.Type != record.ProfileCPU || ingesttest.Label(r.Profile, "service") != "pyapp" ||
			ingesttest.Label(r.Profile, "env") != "test" || ingesttest.Label(r.Profile, "tenant") != "team-py" {
			t.Errorf("record key %q meta %+v labels %v", r.Key, r.Meta, r.Profile.Sample[0].Label)
		}
		for _, loc := range r.Profile.Location {
			for _, ln := range loc.Line {
				if !strings.Contains(ln.Function.Name, "stackstream_hot_function") {
					continue
				}
				hot = true
				// pyspy's frames are Python's: the pseudo-file says so downstream.
				if loc.Mapping == nil || loc.Mapping.File != record.MappingPython {
					t.Errorf("frame %s has mapping %+v, want %s", ln.Function.Name, loc.Mapping, record.MappingPython)
				}
			}
		}
	}
	if !hot {
		t.Fatalf("no record holds stackstream_hot_function (%d records); python said:\n%s", len(recs), out)
	}
}
