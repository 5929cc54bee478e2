package api_test

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestRegexpMatchesGo checks that a =~ matcher selects in OpenSearch exactly
// the values Go's anchored regexp (Prometheus semantics) matches, for
// expressions whose Lucene reading would differ if sent as written.
func TestRegexpMatchesGo(t *testing.T) {
	values := []string{"web-1", "web-10", "Web-2", "db-1", "a.b", "a-b", "x y", "ümlaut", "tab\tx",
		"brace{1}", `back\slash`, `quote"q`, "star*", "7", "77", "d"}
	cl, names := querytest.Setup(t)
	var docs []indices.SampleDoc
	for i, v := range values {
		docs = append(docs, indices.SampleDoc{
			Timestamp: now.Add(-time.Duration(i+1) * time.Minute), Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"x"}, Value: 1,
			Labels: map[string]string{"k8s_pod": v},
		})
	}
	querytest.Index(t, cl, names, querytest.Samples(names, docs...))
	base := serve(t, cl, names, api.Options{})

	for _, re := range []string{
		`web-.*`, `(?i)web-.*`, `^web-1$`, `web-\d+`, `[a-c].b`, `a\.b`, `x\sy`, `.*\w`, `ü.*`, `(web|db)-1`,
		`web-1|`, `back\\slash`, `quote"q`, `star\*`, `brace\{1\}`, `[^w].*`, `.{3}`, `db-1?`, `web-1{1,2}0?`,
		`tab\tx`, `\Qa.b\E`, `[[:digit:]]+`, `\d{2}`, `[^[:alpha:]]`, `\D`, `(?i)WEB-1|DB-1`, `.*`, `.+`, `x y|`,
	} {
		t.Run(re, func(t *testing.T) {
			anchored := regexp.MustCompile("^(?:" + re + ")$")
			var want []string
			for _, v := range values {
				if anchored.MatchString(v) {
					want = append(want, v)
				}
			}
			slices.Sort(want)
			var got api.LabelValuesResponse
			get(t, base, "/api/v1/labels/k8s_pod/values", url.Values{"query": {`{k8s_pod=~` + strconv.Quote(re) + `}`}}, &got)
			if !slices.Equal(got.Values, want) && !(len(got.Values) == 0 && len(want) == 0) {
				t.Fatalf("=~ %q selected %q, Go matches %q", re, got.Values, want)
			}
		})
	}
}
