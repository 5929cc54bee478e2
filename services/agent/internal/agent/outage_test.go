package agent

import (
	"context"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestBrokerOutage cuts two agents off the broker for 30 s: one whose buffer
// holds every profile of the outage, which must all arrive, in order and
// without a gap; and one whose buffer holds 5, whose drops must be counted,
// with everything not dropped arriving.
func TestBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about a minute")
	}
	exe := workload.BuildC(t, t.TempDir(), "outage", false)
	busy := workload.Start(t, exe, 0)

	type agentUnderTest struct {
		name   string
		buffer int
		env    env
		proxy  *testenv.Proxy
		run    *running
	}
	agents := []*agentUnderTest{{name: "large buffer", buffer: 1000}, {name: "small buffer", buffer: 5}}
	for _, a := range agents {
		a.env = newEnv(t)
		a.proxy = testenv.NewProxy(t, a.env.brokers[0])
		var d net.Dialer
		addr := a.proxy.Addr()
		// Brokers advertise their own address: route every dial through
		// the proxy so cutting it cuts the agent off entirely.
		dial := kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		})
		a.run = start(t, a.env, Config{PIDs: []int{busy.PID}, BufferRecords: a.buffer}, dial)
	}
	time.Sleep(3 * time.Second)
	for _, a := range agents {
		a.proxy.SetDown(true)
	}
	t.Log("broker unreachable for 30s")
	time.Sleep(30 * time.Second)
	for _, a := range agents {
		a.proxy.SetDown(false)
	}
	time.Sleep(5 * time.Second)

	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.run.stop(t) }()
	}
	wg.Wait()

	for _, a := range agents {
		t.Run(a.name, func(t *testing.T) {
			got := consume(t, a.env)
			sent, dropped := a.run.result("cpu/ok"), a.run.result("cpu/error")
			if metric := counterValue(t, a.run.reg, "stackstream_agent_records_dropped_total"); int(metric) != dropped {
				t.Fatalf("dropped metric %v, dropped records %d", metric, dropped)
			}
			t.Logf("%d cpu profiles arrived, %d acknowledged, %d dropped", len(got.cpu), sent, dropped)
			if len(got.cpu) != sent {
				t.Fatalf("%d cpu profiles on the topic, %d acknowledged", len(got.cpu), sent)
			}
			if a.buffer >= 100 {
				if dropped != 0 {
					t.Fatalf("%d profiles dropped within the buffer bound", dropped)
				}
				if sent < 35 {
					t.Fatalf("only %d profiles over ~38 s", sent)
				}
				// One profile per interval, back to back: none lost.
				sort.Slice(got.cpu, func(i, j int) bool { return got.cpu[i].TimeNanos < got.cpu[j].TimeNanos })
				for i := 1; i < len(got.cpu); i++ {
					prev := got.cpu[i-1]
					if end := prev.TimeNanos + prev.DurationNanos; end != got.cpu[i].TimeNanos {
						t.Fatalf("gap between profile %d ending %d and the next starting %d", i-1, end, got.cpu[i].TimeNanos)
					}
				}
				return
			}
			if dropped < 20 {
				t.Fatalf("%d drops with a 5-record buffer over a 30 s outage", dropped)
			}
		})
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
