package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/server"
)

// javaAgentVersion is the Pyroscope Java agent release the test runs.
const javaAgentVersion = "2.9.2"

// hotJava burns CPU in Hot.stackstreamHotMethod and allocates in
// Hot.allocate, for the milliseconds of its argument.
const hotJava = `public class Hot {
    static volatile long sink;
    static long stackstreamHotMethod(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) { s += i * 31 ^ (s >>> 3); }
        return s;
    }
    static void allocate() {
        for (int i = 0; i < 1000; i++) { byte[] b = new byte[4096 + i]; sink += b.length; }
    }
    public static void main(String[] args) throws Exception {
        long end = System.currentTimeMillis() + Long.parseLong(args[0]);
        while (System.currentTimeMillis() < end) { sink += stackstreamHotMethod(2_000_000); allocate(); }
    }
}
`

// TestJavaSDK: the unchanged Pyroscope Java agent (from Maven) profiles a
// Java program and pushes JFR (format=jfr, multipart) with a bearer token;
// the records on profiles.raw carry the application name as service, the
// agent's labels as labels, the hostname label as key, and the hot method
// as a [java] frame named pkg.Class.method with its line.
func TestJavaSDK(t *testing.T) {
	env := ingesttest.Setup(t, func(o *server.Options) {
		o.Auth = server.NewAuth(map[string]string{"java-token": "team-java"}, "", "")
	})
	var tools [3]string
	for i, name := range []string{"java", "javac", "mvn"} {
		p, err := exec.LookPath(name)
		if err != nil {
			testenv.Unavailable(t, "%s: %v (apt-get install openjdk-17-jdk-headless maven)", name, err)
		}
		tools[i] = p
	}
	dir := t.TempDir()
	// mvn keeps the jar in ~/.m2 too: later runs do not download it again.
	mvn := exec.Command(tools[2], "-q", "-B", "dependency:copy", "-Dartifact=io.pyroscope:agent:"+javaAgentVersion, "-DoutputDirectory="+dir)
	if out, err := mvn.CombinedOutput(); err != nil {
		testenv.Unavailable(t, "mvn dependency:copy io.pyroscope:agent:%s: %v\n%s", javaAgentVersion, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Hot.java"), []byte(hotJava), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, dir, nil, tools[1], "Hot.java")
	java := exec.Command(tools[0], "-javaagent:"+filepath.Join(dir, "agent-"+javaAgentVersion+".jar"), "-cp", dir, "Hot", "7000")
	java.Env = append(os.Environ(),
		"PYROSCOPE_APPLICATION_NAME=javaapp",
		"PYROSCOPE_SERVER_ADDRESS="+env.URL,
		"PYROSCOPE_AUTH_TOKEN=java-token",
		"PYROSCOPE_UPLOAD_INTERVAL=2s",
		"PYROSCOPE_PROFILER_ALLOC=256k",
		"PYROSCOPE_LABELS=hostname=java-host,env=test",
	)
	out, err := java.CombinedOutput()
	if err != nil {
		t.Fatalf("java: %v\n%s", err, out)
	}
	recs := env.ReadAll(t, 30*time.Second)
	types := map[record.ProfileType]int{}
	hot, allocates := false, false
	for _, r := range recs {
		types[r.Meta.Type]++
		if r.Key != "java-host" || r.Meta.Host != "java-host" || r.Meta.AgentVersion != "pyroscope/javaspy" {
			t.Errorf("record key %q meta %+v", r.Key, r.Meta)
		}
		for k, want := range map[string]string{"service": "javaapp", "env": "test", "tenant": "team-java", "process_runtime_name": "OpenJDK Runtime Environment"} {
			if got := ingesttest.Label(r.Profile, k); got != want {
				t.Errorf("%s record: label %s = %q, want %q", r.Meta.Type, k, got, want)
			}
		}
		for _, loc := range r.Profile.Location {
			if loc.Mapping == nil || loc.Mapping.File != record.MappingJava || !loc.Mapping.HasFunctions {
				t.Fatalf("%s record: location %v has mapping %+v, want %s", r.Meta.Type, loc.Line, loc.Mapping, record.MappingJava)
			}
			ln := loc.Line[0]
			switch {
			case r.Meta.Type == record.ProfileCPU && ln.Function.Name == "Hot.stackstreamHotMethod":
				hot = true
				if ln.Line != 5 {
					t.Errorf("Hot.stackstreamHotMethod at line %d, want 5", ln.Line)
				}
			case r.Meta.Type == record.ProfileAlloc && ln.Function.Name == "Hot.allocate":
				allocates = true
			}
		}
	}
	t.Logf("records by type: %v", types)
	if !hot {
		t.Fatalf("no cpu record holds Hot.stackstreamHotMethod (%d records: %v); java said:\n%s", len(recs), types, out)
	}
	if !allocates {
		t.Errorf("no alloc record holds Hot.allocate: %v", types)
	}
}
