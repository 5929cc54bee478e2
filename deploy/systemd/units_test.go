package systemd

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/deploy/internal/servicebin"
)

// services each have deploy/systemd/stackstream-<name>.service and env/<name>.env.
var services = []string{"agent", "symbolizer", "indexer", "rollup", "query", "ingest"}

// agentCaps are the agent's capabilities, the same set as the Kubernetes DaemonSet's.
const agentCaps = "CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_SYSLOG CAP_CHECKPOINT_RESTORE CAP_KILL CAP_CHOWN CAP_SETUID CAP_SETGID"

// unit is a unit file's directives: section -> key -> values in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	var section string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: line %q is not key=value in a section", path, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// last is the effective value of a single-valued directive.
func (u unit) last(key string) string {
	v := u["Service"][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func TestUnitsHardening(t *testing.T) {
	for _, svc := range services {
		t.Run(svc, func(t *testing.T) {
			u := parseUnit(t, "stackstream-"+svc+".service")
			want := map[string]string{
				"ExecStart":       "/usr/local/bin/stackstream-" + svc,
				"EnvironmentFile": "/etc/stackstream/" + svc + ".env",
				"DynamicUser":     "yes",
				"NoNewPrivileges": "yes",
				"ProtectSystem":   "strict",
				"PrivateTmp":      "yes",
			}
			if svc == "agent" {
				want["AmbientCapabilities"] = agentCaps
				want["CapabilityBoundingSet"] = agentCaps
				// The default STACKSTREAM_AGENT_UNWIND_CACHE_DIR lies below it.
				want["CacheDirectory"] = "stackstream-agent"
			} else {
				want["AmbientCapabilities"] = ""
				want["CapabilityBoundingSet"] = ""
				want["ProtectKernelTunables"] = "yes"
				want["ProtectProc"] = "invisible"
			}
			for k, v := range want {
				if got, ok := u["Service"][k]; !ok || u.last(k) != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			if svc == "agent" {
				// Each of these would blind the agent (docs/DEPLOY.md).
				for _, k := range []string{"ProtectKernelTunables", "ProtectKernelLogs", "ProtectProc", "ProcSubset"} {
					if _, ok := u["Service"][k]; ok {
						t.Errorf("%s set: it hides what the agent reads", k)
					}
				}
			}
			if u.last("RestrictAddressFamilies") == "" || u.last("MemoryMax") == "" {
				t.Errorf("RestrictAddressFamilies=%q MemoryMax=%q, want both set", u.last("RestrictAddressFamilies"), u.last("MemoryMax"))
			}
			if _, err := os.Stat(filepath.Join("env", svc+".env")); err != nil {
				t.Errorf("no example environment file: %v", err)
			}
		})
	}
}

// TestVerify runs systemd-analyze verify on a copy of every unit whose ExecStart and
// EnvironmentFile name a binary built from the workspace and the example
// environment file (verify checks that both exist), and fails on any complaint.
// Every STACKSTREAM_* variable of the example files must be one the binary lists.
func TestVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("systemd-analyze not found (Debian package systemd, in .ci/run's PACKAGES): %v", err)
		}
		t.Skipf("systemd-analyze not found: %v", err)
	}
	root, err := servicebin.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	bins, units := t.TempDir(), t.TempDir()
	var files []string
	for _, svc := range services {
		bin, err := servicebin.Build(root, svc, bins)
		if err != nil {
			t.Fatal(err)
		}
		vars, err := servicebin.Variables(bin)
		if err != nil {
			t.Fatal(err)
		}
		envFile := filepath.Join("env", svc+".env")
		for _, name := range envVariables(t, envFile) {
			if !vars[name] {
				t.Errorf("%s names %s, which stackstream-%s -h does not list", envFile, name, svc)
			}
		}
		envAbs, err := filepath.Abs(envFile)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("stackstream-" + svc + ".service")
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "ExecStart=/usr/local/bin/stackstream-"+svc, "ExecStart="+bin)
		s = strings.ReplaceAll(s, "EnvironmentFile=/etc/stackstream/"+svc+".env", "EnvironmentFile="+envAbs)
		f := filepath.Join(units, "stackstream-"+svc+".service")
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no"}, files...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// envVariables names the variables an environment file sets or shows commented out.
func envVariables(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		if k, _, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "STACKSTREAM_") && !strings.ContainsAny(k, " \t") {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s sets no STACKSTREAM_ variable", path)
	}
	return slices.Compact(names)
}
