package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// BenchmarkSeriesTop1000Hosts times /series grouped per host over one hour
// of per-minute CPU rollups of 1000 hosts (querytest.FleetFixture, 60000
// documents) on the real node, through HTTP on loopback (POST forms): the
// rank of every host, then the top 10 and "other" per step; also with a
// selector listing 5000 hosts. OpenSearch's request cache
// is cleared before each request (outside the timing): a moving "now"
// misses it in production too.
//
//	CI=true go test -run '^$' -bench SeriesTop -benchtime 30x ./internal/api
func BenchmarkSeriesTop1000Hosts(b *testing.B) {
	cl, names := querytest.Setup(b)
	start := time.Now()
	querytest.Index(b, cl, names, querytest.FleetFixture(names, now, 1000))
	b.Logf("indexed 60000 rollup documents and 1000 samples in %v", time.Since(start).Round(time.Millisecond))
	base := serve(b, cl, names, api.Options{})
	// A selection listing 5000 hosts (the 1000 indexed and 4000 absent):
	// a 60 KB selector, so every variant is sent as a POST form.
	listed := make([]string, 5000)
	for i := range listed {
		listed[i] = fmt.Sprintf("host-%03d", i)
		if i >= 1000 {
			listed[i] = fmt.Sprintf("absent-%04d", i)
		}
	}
	for _, tc := range []struct{ name, step, query string }{
		{"auto-step", "", ""}, {"step-1m", "1m", ""}, {"5000-hosts-listed", "", `{host=~"` + strings.Join(listed, "|") + `"}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := url.Values{"from": {now.Add(-time.Hour).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}, "group_by": {"host"}, "top": {"10"}}
			if tc.step != "" {
				q.Set("step", tc.step)
			}
			if tc.query != "" {
				q.Set("query", tc.query)
			}
			u := base + "/api/v1/series"
			for b.Loop() {
				b.StopTimer()
				opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.Prefix+"*/_cache/clear?request=true", nil)
				b.StartTimer()
				resp, err := http.PostForm(u, q)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %v %v", u, err, resp)
				}
				resp.Body.Close()
			}
		})
	}
}
