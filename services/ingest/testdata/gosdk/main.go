// Command gosdk pushes profiles of a hot function to a Pyroscope server
// with the real Go SDK (github.com/grafana/pyroscope-go). The ingest tests
// build and run it; it lives in testdata with its own go.mod so that
// stackstream-ingest does not depend on the SDK.
//
//	gosdk -server http://127.0.0.1:4040 -app sdkapp -for 3s
//
// It exits 1 when the SDK logged an error (an upload the server refused).
package main

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/grafana/pyroscope-go"
)

type logger struct{ errors atomic.Int64 }

func (l *logger) Infof(format string, args ...any)  {}
func (l *logger) Debugf(format string, args ...any) {}
func (l *logger) Errorf(format string, args ...any) {
	l.errors.Add(1)
	fmt.Fprintf(os.Stderr, "pyroscope error: "+format+"\n", args...)
}

var sink atomic.Uint64

//go:noinline
func stackstreamHotFunction(until time.Time) {
	x := uint64(1)
	for time.Now().Before(until) {
		for i := 0; i < 100000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Add(x)
}

func main() {
	server := flag.String("server", "http://127.0.0.1:4040", "server address")
	app := flag.String("app", "sdkapp", "application name")
	user := flag.String("user", "", "basic auth user")
	password := flag.String("password", "", "basic auth password")
	d := flag.Duration("for", 3*time.Second, "how long to burn CPU")
	flag.Parse()
	log := &logger{}
	p, err := pyroscope.Start(pyroscope.Config{
		ApplicationName:   *app,
		ServerAddress:     *server,
		BasicAuthUser:     *user,
		BasicAuthPassword: *password,
		Logger:            log,
		UploadRate:        time.Second,
		Tags:              map[string]string{"hostname": "gosdk-host", "env": "test"},
		ProfileTypes: []pyroscope.ProfileType{pyroscope.ProfileCPU, pyroscope.ProfileAllocObjects,
			pyroscope.ProfileAllocSpace, pyroscope.ProfileInuseObjects, pyroscope.ProfileInuseSpace},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		os.Exit(1)
	}
	stackstreamHotFunction(time.Now().Add(*d))
	p.Flush(true)
	if err := p.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		os.Exit(1)
	}
	if n := log.errors.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "%d SDK errors\n", n)
		os.Exit(1)
	}
	fmt.Println("ok")
}
