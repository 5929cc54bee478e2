package store_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
	"github.com/stackstream/stackstream/services/query/internal/selector"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// TestSeriesRemembersClosedWindows: a chart read again answers its settled
// hours and closed 10-minute windows from memory, and still equals the sum
// of the minutes after documents of them are rewritten, added and deleted
// (the units changed are read again, the others not), for the same range,
// another step, and a range a window later.
func TestSeriesRemembersClosedWindows(t *testing.T) {
	cl, names := querytest.Setup(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first := now.Add(-6 * time.Hour)
	// host -> minute -> value; every minute of every host differs.
	minutes := map[string]map[time.Time]int64{}
	service := func(host string) string { return "svc-" + host[len(host)-1:] }
	// docs are a host's minute, 10-minute and hourly documents of the
	// windows starting in [from, to), as the rollup writes them (the hour
	// still filling has no hourly document).
	docs := func(host string, from, to time.Time) []querytest.Doc {
		var out []querytest.Doc
		tens, hours := map[time.Time]int64{}, map[time.Time]int64{}
		for m, v := range minutes[host] {
			tens[m.Truncate(10*time.Minute)] += v
			hours[m.Truncate(time.Hour)] += v
		}
		add := func(at time.Time, res string, v int64) {
			if !at.Before(from) && at.Before(to) {
				out = append(out, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindService,
					Type: "cpu", Service: service(host), Host: host, Value: v, StackValue: v}))
			}
		}
		for m, v := range minutes[host] {
			add(m, indices.ResolutionMinute, v)
		}
		for w, v := range tens {
			add(w, indices.ResolutionTenMinutes, v)
		}
		for h, v := range hours {
			if h.Add(time.Hour).Before(now) {
				add(h, indices.ResolutionHour, v)
			}
		}
		return out
	}
	var all []querytest.Doc
	for h := range 8 {
		host := fmt.Sprintf("h-%d", h)
		minutes[host] = map[time.Time]int64{}
		for m := first; m.Before(now); m = m.Add(time.Minute) {
			minutes[host][m] = int64(h+1)*1e9 + int64(m.Minute())*1e7 + int64(m.Hour())*1e5
		}
		all = append(all, docs(host, first, now)...)
	}
	querytest.Index(t, cl, names, all)
	sel, err := selector.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(cl, names, store.Options{Now: func() time.Time { return now }})

	// chart checks every point of the top 3 hosts and "other" against the
	// minutes and returns the units answered from memory.
	chart := func(t *testing.T, sel selector.Selector, from, to time.Time, step time.Duration) int {
		t.Helper()
		lines, err := st.Series(context.Background(), store.Selection{Type: "cpu", Selector: sel, Range: store.TimeRange{From: from, To: to, Now: to}}, step, "host", 3)
		if err != nil {
			t.Fatal(err)
		}
		want := func(hosts []string) map[int64]float64 {
			out := map[int64]float64{}
			for _, h := range hosts {
				for m, v := range minutes[h] {
					if !m.Before(from) && m.Before(to) {
						out[m.Truncate(step).UnixMilli()] += float64(v) / float64(step)
					}
				}
			}
			return out
		}
		// The top 3 by their sum over the range (every sum differs).
		sums := map[string]int64{}
		var hosts []string
		for h, ms := range minutes {
			hosts = append(hosts, h)
			for m, v := range ms {
				if !m.Before(from) && m.Before(to) {
					sums[h] += v
				}
			}
		}
		slices.SortFunc(hosts, func(a, b string) int { return cmp.Compare(sums[b], sums[a]) })
		var top []string
		check := func(name string, points [][2]float64, w map[int64]float64) {
			if len(points) != len(w) {
				t.Fatalf("%s: %d points, want %d", name, len(points), len(w))
			}
			for _, p := range points {
				if exp := w[int64(p[0])]; math.Abs(p[1]-exp) > 1e-9*exp {
					t.Fatalf("%s at %s: %v cores, want %v", name, time.UnixMilli(int64(p[0])).UTC().Format("15:04"), p[1], exp)
				}
			}
		}
		for i, l := range lines.Lines {
			if l.Key != hosts[i] {
				t.Fatalf("line %d is %s, want %s (ranked %v)", i, l.Key, hosts[i], hosts)
			}
			top = append(top, l.Key)
			check(l.Key, l.Points, want([]string{l.Key}))
		}
		var rest []string
		for h := range minutes {
			if !slices.Contains(top, h) {
				rest = append(rest, h)
			}
		}
		if lines.Other == nil || len(top) != 3 || lines.Total != len(minutes) {
			t.Fatalf("%d lines of %d, other %v; want 3 of %d and other", len(top), lines.Total, lines.Other != nil, len(minutes))
		}
		check("other", lines.Other.Points, want(rest))
		return lines.Remembered
	}
	// 06:00-12:00 at 12:00: hours 06-10 settled, windows 11:00-11:40
	// closed, 11:50 still filling.
	const units = 5 + 5
	day := func(t *testing.T) int { return chart(t, sel, first, now, 10*time.Minute) }
	reindex := func(host string, from, to time.Time) { querytest.Index(t, cl, names, docs(host, from, to)) }

	if n := day(t); n != 0 {
		t.Fatalf("first chart: %d units from memory, want 0", n)
	}
	if n := day(t); n != units {
		t.Fatalf("the same chart again: %d units from memory, want %d", n, units)
	}
	t.Run("an hour rewritten", func(t *testing.T) {
		h := first.Add(2 * time.Hour) // 08:00
		for m := h; m.Before(h.Add(time.Hour)); m = m.Add(time.Minute) {
			minutes["h-2"][m] += 5e9 // h-2 becomes the heaviest host
		}
		reindex("h-2", h, h.Add(time.Hour))
		if n := day(t); n != units-1 {
			t.Fatalf("%d units from memory, want %d", n, units-1)
		}
	})
	t.Run("a host added to a closed window", func(t *testing.T) {
		w := now.Add(-40 * time.Minute) // 11:20
		minutes["h-new"] = map[time.Time]int64{}
		for m := w; m.Before(w.Add(10 * time.Minute)); m = m.Add(time.Minute) {
			minutes["h-new"][m] = 3e9
		}
		reindex("h-new", w, w.Add(10*time.Minute))
		if n := day(t); n != units-1 {
			t.Fatalf("%d units from memory, want %d", n, units-1)
		}
	})
	t.Run("a host's documents deleted from an hour", func(t *testing.T) {
		h := first.Add(4 * time.Hour) // 10:00
		var ids []string
		for _, d := range docs("h-5", h, h.Add(time.Hour)) {
			ids = append(ids, d.ID)
		}
		for m := range minutes["h-5"] {
			if !m.Before(h) && m.Before(h.Add(time.Hour)) {
				delete(minutes["h-5"], m)
			}
		}
		body := fmt.Sprintf(`{"query":{"ids":{"values":[%q`, ids[0])
		for _, id := range ids[1:] {
			body += fmt.Sprintf(",%q", id)
		}
		body += "]}}}"
		status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.Rollups(h)+"/_delete_by_query?refresh=true", []byte(body))
		if err != nil || status != http.StatusOK {
			t.Fatalf("delete: HTTP %d %v: %s", status, err, resp)
		}
		day(t) // read again
		if n := day(t); n != units {
			t.Fatalf("after the deletion was read: %d units from memory, want %d", n, units)
		}
	})
	t.Run("another step and a later range", func(t *testing.T) {
		if n := chart(t, sel, first, now, time.Hour); n != units {
			t.Fatalf("step 1h: %d units from memory, want %d", n, units)
		}
		// h-0 heaviest by far in 11:50 (still filling at 12:00), so that
		// the ranking below holds it only with that window added.
		for m := now.Add(-10 * time.Minute); m.Before(now); m = m.Add(time.Minute) {
			minutes["h-0"][m] += 3e11
		}
		reindex("h-0", now.Add(-10*time.Minute), now)
		later := now.Add(10 * time.Minute)
		for h, ms := range minutes {
			if h == "h-new" {
				continue
			}
			for m := now; m.Before(later); m = m.Add(time.Minute) {
				ms[m] = 7e8
			}
			reindex(h, now, later)
		}
		// 06:00-12:10 at 12:10: the units of the chart before and window
		// 11:50, now closed: its groups' sums added to those remembered.
		if n := chart(t, sel, first, later, 10*time.Minute); n != units {
			t.Fatalf("a window more: %d units from memory, want %d", n, units)
		}
		// 06:10-12:10 at 12:10: hour 06 from its windows 06:10-06:50 (not
		// held: read), hours 07-10 and windows 11:00-11:50 held; the
		// groups' sums read again (hour 06 is out of the range).
		if n := chart(t, sel, first.Add(10*time.Minute), later, 10*time.Minute); n != 4+6 {
			t.Fatalf("a window later: %d units from memory, want %d", n, 4+6)
		}
	})
	t.Run("a version not yet visible when first read", func(t *testing.T) {
		// Indexed, not refreshed: the first read of a new selection must
		// see it (the index is refreshed before), or it would be held
		// without it once visible, its _seq_no under the one remembered.
		w := now.Add(-30 * time.Minute) // 11:30
		minutes["h-late"] = map[time.Time]int64{}
		for m := w; m.Before(w.Add(10 * time.Minute)); m = m.Add(time.Minute) {
			minutes["h-late"][m] = 4e9
		}
		if err := querytest.Bulk(context.Background(), cl, docs("h-late", w, w.Add(10*time.Minute))); err != nil {
			t.Fatal(err)
		}
		every, err := selector.Parse(`{service=~"svc-.*"}`)
		if err != nil {
			t.Fatal(err)
		}
		if n := chart(t, every, first, now, 10*time.Minute); n != 0 {
			t.Fatalf("first chart of the selection: %d units from memory, want 0", n)
		}
		if err := querytest.Refresh(context.Background(), cl, names); err != nil {
			t.Fatal(err)
		}
		if n := chart(t, every, first, now, 10*time.Minute); n != units {
			t.Fatalf("again: %d units from memory, want %d", n, units)
		}
	})
}
