package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/ktest"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// TestDebuginfodCredentialsNotLogged runs the binary at debug level with
// debuginfod URLs that carry credentials: a dead server (its errors are
// logged), Debian's real debuginfod (it serves two of the binaries) and a
// malformed URL given to a second process (a start-up error). No line of
// either output holds a password or a user name.
func TestDebuginfodCredentialsNotLogged(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	corpus := testbin.BuildCorpus(t, t.TempDir())
	live := testbin.Debuginfod(t, corpus.Served, corpus.C.BuildID, corpus.Go.BuildID)
	topics, cl := ktest.Topics(t, brokers, 1)
	bin := buildBinary(t)
	prefix := strings.TrimSuffix(topics.ProfilesRaw, "profiles.raw")
	withCreds := func(u, user, pass string) string {
		return strings.Replace(u, "http://", "http://"+user+":"+pass+"@", 1)
	}
	urls := withCreds("http://127.0.0.1:1", "alice-user", "dead-s3cr3t") + " " + withCreds(live, "bob-user", "live-s3cr3t")
	p := startProc(t, bin, []string{
		"STACKSTREAM_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"STACKSTREAM_KAFKA_TOPIC_PREFIX=" + prefix,
		"STACKSTREAM_SYMBOLIZER_GROUP=" + testenv.Name(t, "grp-"),
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=" + testenv.Name(t, "txn-"),
		"STACKSTREAM_SYMBOLIZER_DEBUG_DIRS=",
		"STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS=" + urls,
		"STACKSTREAM_LISTEN_ADDR=127.0.0.1:0",
		"STACKSTREAM_LOG_LEVEL=debug",
	}, "creds")
	v, err := record.EncodeProfile(corpus.Profile(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topics.ProfilesRaw, Value: v, Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers()}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if out := ktest.Consume(t, brokers, topics.ProfilesSymbolized, 1, 2*time.Minute, 0); len(out) != 1 {
		t.Fatalf("%d records symbolized", len(out))
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}

	bad := exec.Command(bin)
	bad.Env = append(os.Environ(), "STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS=ftp://carol-user:bad-s3cr3t@127.0.0.1:1/x")
	badOut, err := bad.CombinedOutput()
	if err == nil {
		t.Fatal("a malformed debuginfod URL was accepted")
	}

	for name, out := range map[string]string{"running": string(log), "bad config": string(badOut)} {
		for _, secret := range []string{"s3cr3t", "alice-user", "bob-user", "carol-user"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s output holds %q:\n%s", name, secret, out)
			}
		}
	}
	// The URLs were logged (redacted), and a fetch error naming the dead
	// server too: the lines that could have leaked were written.
	if !strings.Contains(string(log), "http://***@127.0.0.1:1") || !strings.Contains(string(log), "fetch debug info") || !strings.Contains(string(badOut), "ftp://***@127.0.0.1:1") {
		t.Fatalf("redacted URLs not in the output:\n%s\n%s", log, badOut)
	}
}
