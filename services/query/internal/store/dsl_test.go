package store

import (
	"encoding/json"
	"testing"
	"time"
)

// TestRequestBodies pins the JSON the builders send: a field left out by
// omitempty or a clause in the wrong place would change what OpenSearch
// counts without any test against the real node noticing at once.
func TestRequestBodies(t *testing.T) {
	at := func(h, m int) int64 { return time.Date(2026, 11, 30, h, m, 0, 0, time.UTC).UnixMilli() }
	tr := TimeRange{From: time.UnixMilli(at(1, 30)).UTC(), To: time.UnixMilli(at(12, 20)).UTC(), Now: time.UnixMilli(at(12, 20)).UTC()}
	window := func(resolution string, from, to int64) string {
		return `{"bool":{"filter":[{"term":{"resolution":"` + resolution + `"}},{"range":{"@timestamp":{"format":"epoch_millis","gte":` +
			itoa(from) + `,"lt":` + itoa(to) + `}}}]}}`
	}
	tests := []struct {
		name string
		body any
		want string
	}{
		{"minute windows only", rollupTime(tr, true), window("1m", at(1, 30), at(12, 20))},
		{
			// 12:00-12:20 is not settled at 12:20: minutes, like 01:30-02:00.
			"hours with minutes either side", rollupTime(tr, false),
			`{"bool":{"should":[` + window("1h", at(2, 0), at(12, 0)) + `,` + window("1m", at(1, 30), at(2, 0)) + `,` +
				window("1m", at(12, 0), at(12, 20)) + `],"minimum_should_match":1}}`,
		},
		{
			"series: top groups and the rest", aggsRequest(term("kind", "service"), topSeriesAggs("host", []string{"a", "b"}, 5*time.Minute, Aggs{"v": sumOf("value")}, true)),
			`{"size":0,"track_total_hits":false,"query":{"term":{"kind":"service"}},"aggs":{` +
				`"rest":{"filter":{"bool":{"filter":[{"exists":{"field":"host"}}],"must_not":[{"terms":{"host":["a","b"]}}]}},` +
				`"aggs":{"time":{"date_histogram":{"field":"@timestamp","fixed_interval":"300s","min_doc_count":1},"aggs":{"v":{"sum":{"field":"value"}}}}}},` +
				`"top":{"filter":{"terms":{"host":["a","b"]}},"aggs":{"groups":{"terms":{"field":"host","size":2},"aggs":{` +
				`"time":{"date_histogram":{"field":"@timestamp","fixed_interval":"300s","min_doc_count":1},"aggs":{"v":{"sum":{"field":"value"}}}}}}}}}}`,
		},
		{
			"stack frames by ID", &Request{Size: 2, TrackTotalHits: false, Query: idsOf([]string{"a", "b"}), Source: &Source{Includes: []string{"frames"}}},
			`{"size":2,"track_total_hits":false,"query":{"ids":{"values":["a","b"]}},"_source":{"includes":["frames"]}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("body\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestWildcardValue(t *testing.T) {
	if got := wildcardValue(`a*b?c\`); got != `*a\*b\?c\\*` {
		t.Fatalf("wildcardValue = %s", got)
	}
}
