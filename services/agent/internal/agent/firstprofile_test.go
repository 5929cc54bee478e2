package agent

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// snapshot copies the events recorded so far.
func (r *running) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// buildIDOf returns the build ID of exe's mapping in the cpu profiles.
func buildIDOf(t *testing.T, got published, pid int, exe string) string {
	t.Helper()
	for _, s := range pidSamples(got.cpu, pid) {
		for _, loc := range s.Location {
			if loc.Mapping != nil && loc.Mapping.File == exe && loc.Mapping.BuildID != "" {
				return loc.Mapping.BuildID
			}
		}
	}
	t.Fatalf("no cpu sample of pid %d in %s with a build ID", pid, exe)
	return ""
}

// TestProfileAfterDebuginfo profiles a brand-new binary: no cpu record
// naming its build ID may reach the producer before the broker acknowledged
// the binary's debuginfo record, so a symbolizer reading the profile finds
// the symbols on the debuginfo topic.
func TestProfileAfterDebuginfo(t *testing.T) {
	e := newEnv(t)
	exe := workload.BuildC(t, t.TempDir(), "firstprofile", false)
	p := workload.Start(t, exe, 0)
	r := start(t, e, Config{PIDs: []int{p.PID}})
	waitFor(t, 30*time.Second, "two cpu profiles acknowledged", func() bool { return r.result("cpu/ok") >= 2 })
	r.stop(t)
	events := r.snapshot()
	got := consume(t, e)
	id := buildIDOf(t, got, p.PID, exe)
	if got.debuginfo[id] == nil {
		t.Fatalf("no debuginfo for %s", id)
	}
	acked := -1
	checked := 0
	for i, ev := range events {
		switch {
		case ev.kind == kindDebuginfo && ev.acked && ev.key == id:
			if ev.err != nil {
				t.Fatalf("debuginfo of %s failed: %v", id, ev.err)
			}
			acked = i
		case ev.kind == "cpu" && !ev.acked:
			for _, b := range ev.buildIDs {
				if b != id {
					continue
				}
				if acked < 0 {
					t.Fatalf("a cpu record naming %s was produced (event %d) before its debuginfo was acknowledged", id, i)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no cpu record named %s", id)
	}
}

// TestProfileWhenDebuginfoFails makes every debuginfo record fail (the topic
// refuses records over 64 bytes): the profiles still arrive, and the early
// publication is counted.
func TestProfileWhenDebuginfoFails(t *testing.T) {
	e := newEnv(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := "64"
	res, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &small}}, e.topics.Debuginfo)
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		t.Fatalf("alter %s: %v", e.topics.Debuginfo, err)
	}
	exe := workload.BuildC(t, t.TempDir(), "nodebuginfo", false)
	p := workload.Start(t, exe, 0)
	r := start(t, e, Config{PIDs: []int{p.PID}})
	waitFor(t, 30*time.Second, "two cpu profiles acknowledged", func() bool { return r.result("cpu/ok") >= 2 })
	r.stop(t)
	got := consume(t, e)
	buildIDOf(t, got, p.PID, exe)
	if len(got.debuginfo) != 0 || r.result("debuginfo/error") == 0 {
		t.Fatalf("%d debuginfo values on the topic, %d failed: want every one refused", len(got.debuginfo), r.result("debuginfo/error"))
	}
	if n := counterValue(t, r.reg, "stackstream_agent_profiles_before_debuginfo_total"); n == 0 {
		t.Fatal("profiles published without their debuginfo not counted")
	}
}

// TestProfileDuringOutage starts a new binary while the broker is
// unreachable: its profile waits DebuginfoHold for the debuginfo, then goes
// to the producer's buffer anyway, and both arrive once the broker is back.
func TestProfileDuringOutage(t *testing.T) {
	e := newEnv(t)
	proxy := testenv.NewProxy(t, e.brokers[0])
	var d net.Dialer
	addr := proxy.Addr()
	dial := kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	})
	dir := t.TempDir()
	exe := workload.BuildC(t, dir, "outagenew", false)
	workload.Start(t, workload.BuildC(t, dir, "outageold", false), 0)
	r := start(t, e, Config{Comm: "^outage", DebuginfoHold: 2 * time.Second}, dial)
	waitFor(t, 30*time.Second, "a first cpu profile acknowledged", func() bool { return r.result("cpu/ok") >= 1 })
	proxy.SetDown(true)
	p := workload.Start(t, exe, 0)
	waitFor(t, 30*time.Second, "a profile published after its hold", func() bool {
		return counterValue(t, r.reg, "stackstream_agent_profiles_before_debuginfo_total") >= 1
	})
	proxy.SetDown(false)
	waitFor(t, 60*time.Second, "cpu profiles acknowledged after the outage", func() bool { return r.result("cpu/ok") >= 3 })
	r.stop(t)
	got := consume(t, e)
	id := buildIDOf(t, got, p.PID, exe)
	if got.debuginfo[id] == nil {
		t.Fatalf("no debuginfo for %s after the outage", id)
	}
}
