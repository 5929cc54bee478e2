package sdktest

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
)

type flameNode struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind"`
	Self     int64        `json:"self"`
	Children []*flameNode `json:"children"`
}

func (n *flameNode) walk(f func(*flameNode)) {
	f(n)
	for _, c := range n.Children {
		c.walk(f)
	}
}

// TestPipelineOTLP sends the eBPF-profiler-shaped request, built with the
// official pdata library, over gRPC to the real stackstream-ingest and
// follows it through the real symbolizer, indexer and query API: the
// flame graph of its service shows the Python and JavaScript frames named
// with their kinds and exactly the CPU time sent (events times the 50 ms
// period), the Ruby frame as jit, and the native frame of a binary whose
// symbols nobody has as an unresolved address in it.
func TestPipelineOTLP(t *testing.T) {
	p := startPipeline(t)
	pd := ingesttest.EBPFProfilerRequest(time.Now())
	pd.ResourceProfiles().At(0).Resource().Attributes().PutStr("service.name", p.name)
	cc, err := grpc.NewClient(p.otlpGRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	t.Logf("partial success: %d rejected (%s)", resp.PartialSuccess().RejectedProfiles(), resp.PartialSuccess().ErrorMessage())

	want := map[string]struct {
		kind string
		self int64
	}{
		"handle_request":     {"python", 3 * ingesttest.OTLPPeriodNs},
		"<module>":           {"python", 0},
		"render":             {"js", 1 * ingesttest.OTLPPeriodNs},
		"Rack::Handler#call": {"jit", 0},
	}
	sel := url.QueryEscape(`{service="` + p.name + `"}`)
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var last string
	for {
		var fg struct {
			Total int64      `json:"total"`
			Root  *flameNode `json:"root"`
		}
		if getJSON("http://"+p.queryAddr+"/api/v1/flamegraph?type=cpu&from=now-15m&to=now&query="+sel, &fg) == nil && fg.Root != nil {
			found := map[string]*flameNode{}
			native := ""
			fg.Root.walk(func(n *flameNode) {
				found[n.Name] = n
				if strings.HasPrefix(n.Name, "libpython3.12.so.1.0") {
					native = n.Name + "/" + n.Kind
				}
			})
			ok := fg.Total == 4*ingesttest.OTLPPeriodNs && native != "" && !strings.HasSuffix(native, "/python")
			for name, w := range want {
				n := found[name]
				if n == nil || n.Kind != w.kind || n.Self != w.self {
					ok = false
				}
			}
			last = ""
			for name, n := range found {
				last += name + "(" + n.Kind + "," + time.Duration(n.Self).String() + ") "
			}
			if ok {
				t.Logf("flame graph of %s: total %s, %s", p.name, time.Duration(fg.Total), last)
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the flame graph of %s never showed the OTLP frames with their kinds and CPU time; last: %s", p.name, last)
		case <-time.After(time.Second):
		}
	}
}
