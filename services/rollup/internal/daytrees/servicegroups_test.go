package daytrees

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// TestServiceGroups: a pass writes, per type and settled hour, the service
// groups document equal to the hour's service documents gathered by
// indices.ServiceGroupsBuilder (groups paged past one composite page, a
// group without a host, an hour missing a 10-minute document), with the
// fingerprint of those documents, and none for an hour not settled; a
// second pass writes nothing; an hour rewritten afterwards (a late
// profile) makes the next pass rewrite that hour's document only.
func TestServiceGroups(t *testing.T) {
	ctx := context.Background()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "sg-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), cl, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 5, 20, 0, 0, time.UTC) // hours settled until 05:00
	bulk := func(docs []indices.RollupDoc) {
		t.Helper()
		var buf bytes.Buffer
		for _, d := range docs {
			meta, _ := json.Marshal(map[string]any{"index": map[string]any{"_index": names.Rollups(d.Timestamp), "_id": indices.RollupID(&d)}})
			body, _ := json.Marshal(&d)
			buf.Write(meta)
			buf.WriteByte('\n')
			buf.Write(body)
			buf.WriteByte('\n')
		}
		status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/_bulk?refresh=true", buf.Bytes())
		if err != nil || status != http.StatusOK || bytes.Contains(resp, []byte(`"errors":true`)) {
			t.Fatalf("bulk: %d %v %.500s", status, err, resp)
		}
	}
	// 2,100 groups (past the 10,000 buckets of a composite page with 6
	// windows each) of cpu in hours 02:00-04:00 and 05:00 (not settled),
	// offcpu in 03:00 with a 10-minute document missing (written: the query
	// checks the sums).
	service := func(typ, svc, host, res string, at time.Time, v int64) indices.RollupDoc {
		return indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindService, Type: typ, Service: svc, Host: host, Value: v}
	}
	hourDocs := func(typ string, hour time.Time, groups int, skip bool, extra int64) []indices.RollupDoc {
		var docs []indices.RollupDoc
		for g := range groups {
			svc, host := fmt.Sprintf("svc-%d", g%7), fmt.Sprintf("h-%04d", g)
			if g == groups-1 {
				host = ""
			}
			var sum int64
			for w := range 6 {
				v := int64(g+1)*1000 + int64(w)
				if g == 0 && w == 0 {
					v += extra
				}
				sum += v
				if skip && g == 3 && w == 2 {
					continue
				}
				docs = append(docs, service(typ, svc, host, indices.ResolutionTenMinutes, hour.Add(time.Duration(w)*10*time.Minute), v))
			}
			docs = append(docs, service(typ, svc, host, indices.ResolutionHour, hour, sum))
			docs = append(docs, service(typ, svc, host, indices.ResolutionMinute, hour, 1)) // not read
		}
		return docs
	}
	day := now.Truncate(24 * time.Hour)
	byHour := map[string][]indices.RollupDoc{}
	for h := 2; h <= 5; h++ {
		hour := day.Add(time.Duration(h) * time.Hour)
		byHour["cpu"+hour.Format("15")] = hourDocs("cpu", hour, 2100, false, 0)
	}
	byHour["offcpu03"] = hourDocs("offcpu", day.Add(3*time.Hour), 5, true, 0)
	for _, docs := range byHour {
		bulk(docs)
	}
	c := &Compactor{Client: cl, Names: names, Days: 1, Now: func() time.Time { return now }}
	check := func(wantWritten int, want map[string]bool) {
		t.Helper()
		n, err := c.Apply(ctx)
		if err != nil || n != wantWritten {
			t.Fatalf("pass wrote %d (%v), want %d", n, err, wantWritten)
		}
		opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.RollupsPattern()+"/_refresh", nil)
		for key, docs := range byHour {
			var b indices.ServiceGroupsBuilder
			for _, d := range docs {
				b.Add(d.Service, d.Host, d.Resolution, d.Timestamp, 1, d.Value)
			}
			hour := docs[0].Timestamp.Truncate(time.Hour)
			checks, err := c.hourChecks(ctx, names.Rollups(hour), hour, hour.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			exp := b.Doc(docs[0].Type, hour, checks[hourKey{docs[0].Type, hour.Unix()}])
			status, resp, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.Rollups(exp.Timestamp)+"/_doc/"+indices.RollupID(&exp), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !want[key] {
				if status != http.StatusNotFound {
					t.Fatalf("%s: a service groups document (%d), want none", key, status)
				}
				continue
			}
			var got struct {
				Source indices.RollupDoc `json:"_source"`
			}
			if status != http.StatusOK || json.Unmarshal(resp, &got) != nil {
				t.Fatalf("%s: %d %.300s", key, status, resp)
			}
			if !reflect.DeepEqual(got.Source, exp) {
				gs, _ := indices.DecodeServiceGroups(got.Source.Groups)
				t.Fatalf("%s: sources %s value %d, %d groups; want %s %d", key, got.Source.Sources, got.Source.Value, len(gs), exp.Sources, exp.Value)
			}
		}
	}
	want := map[string]bool{"cpu02": true, "cpu03": true, "cpu04": true, "offcpu03": true}
	check(4, want)
	check(0, want)
	// A late profile adds to hour 03:00's first group: its 10-minute and
	// hourly documents are rewritten.
	byHour["cpu03"] = hourDocs("cpu", day.Add(3*time.Hour), 2100, false, 555)
	bulk(byHour["cpu03"])
	check(1, want)
}
