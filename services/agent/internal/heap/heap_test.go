package heap

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets([]string{"checkout=http://10.0.0.1:6060/debug/pprof/heap", " http://db:6060/debug/pprof/heap ", ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Service != "checkout" || got[1].Service != "db:6060" || got[1].URL != "http://db:6060/debug/pprof/heap" {
		t.Fatalf("ParseTargets = %+v", got)
	}
	for _, bad := range []string{"ftp://x/heap", "svc=notaurl", "http://"} {
		if _, err := ParseTargets([]string{bad}); err == nil {
			t.Errorf("ParseTargets(%q): want an error", bad)
		}
	}
}

func TestScrape(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		pprof.Lookup("heap").WriteTo(w, 0)
	})
	mux.HandleFunc("/notpprof", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cl := NewClient(DefaultLimits)

	p, err := Scrape(context.Background(), cl, Target{Service: "svc", URL: srv.URL + "/debug/pprof/heap"}, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) == 0 {
		t.Fatal("heap profile without samples")
	}
	for _, s := range p.Sample {
		if s.Label[record.LabelService][0] != "svc" {
			t.Fatalf("labels %v", s.Label)
		}
	}
	for _, path := range []string{"/notpprof", "/missing"} {
		if _, err := Scrape(context.Background(), cl, Target{Service: "svc", URL: srv.URL + path}, DefaultLimits); err == nil {
			t.Errorf("Scrape(%s): want an error", path)
		}
	}
}

// gzipped compresses b.
func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// heapProfile is this process's heap profile, gzip pprof as served.
func heapProfile(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestScrapeLimits serves hostile endpoints: each scrape fails with an error
// that names the URL and says why, within the limits, and the next scrape
// of a good endpoint still works.
func TestScrapeLimits(t *testing.T) {
	lim := Limits{MaxCompressedBytes: 64 << 10, MaxBytes: 1 << 20, MaxEntries: 10_000, Timeout: 2 * time.Second}
	bomb := gzipped(t, make([]byte, 64<<20)) // 64 MiB of zeros in ~64 KiB
	if len(bomb) > int(lim.MaxCompressedBytes) {
		bomb = gzipped(t, make([]byte, 32<<20))
	}
	nested := gzipped(t, gzipped(t, make([]byte, 4<<20)))
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	mux := http.NewServeMux()
	serve := func(b []byte) http.HandlerFunc { return func(w http.ResponseWriter, _ *http.Request) { w.Write(b) } }
	mux.HandleFunc("/bomb", serve(bomb))
	mux.HandleFunc("/nested", serve(nested))
	mux.HandleFunc("/big", serve(make([]byte, 1<<20)))
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/heap", http.StatusFound) })
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/trickle", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte{0x1f})
		w.(http.Flusher).Flush()
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	good := heapProfile(t)
	mux.HandleFunc("/heap", serve(good))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cl := NewClient(lim)

	for _, c := range []struct {
		path string
		want error
	}{
		{"/bomb", ErrTooLarge},
		{"/nested", ErrInvalid},
		{"/big", ErrTooLarge},
		{"/redirect", nil},
		{"/hang", context.DeadlineExceeded},
		{"/trickle", nil},
	} {
		t.Run(c.path, func(t *testing.T) {
			url := srv.URL + c.path
			_, err := Scrape(context.Background(), cl, Target{Service: "svc", URL: url}, lim)
			if err == nil {
				t.Fatal("want an error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(url)) {
				t.Fatalf("error %q does not name %s", err, url)
			}
			t.Log(err)
		})
	}
	if _, err := Scrape(context.Background(), cl, Target{Service: "svc", URL: srv.URL + "/heap"}, lim); err != nil {
		t.Fatalf("good endpoint after the bad ones: %v", err)
	}
}

// FuzzDecode feeds arbitrary bodies to the scrape decoder: it must return a
// profile or an error, and allocate within a bound set by the limits, not by
// what the body claims.
func FuzzDecode(f *testing.F) {
	good := heapProfile(f)
	f.Add(good)
	raw, err := profile.Parse(bytes.NewReader(good))
	if err != nil {
		f.Fatal(err)
	}
	var unc bytes.Buffer
	if err := raw.WriteUncompressed(&unc); err != nil {
		f.Fatal(err)
	}
	f.Add(unc.Bytes())
	f.Add(gzipped(f, make([]byte, 32<<20)))
	f.Add(gzipped(f, gzipped(f, make([]byte, 1<<20))))
	f.Add([]byte("heap profile: 1: 2 [3: 4] @ heap/1048576\n1: 2 [3: 4] @ 0x1 0x2\n"))
	f.Add(bytes.Repeat([]byte{0x12, 0x00}, 100_000))
	lim := Limits{MaxCompressedBytes: 256 << 10, MaxBytes: 1 << 20, MaxEntries: 20_000, Timeout: time.Second}
	// The bound: gunzip's buffer (~2 x MaxBytes), ~220 bytes per message,
	// and 16 bytes per byte of packed location IDs (an ID and its pointer),
	// with room; an unbounded gunzip of the 32 MiB seed alone takes more.
	const maxAlloc = 2*(1<<20) + 20_000*220 + 16*(1<<20) + 8<<20
	f.Fuzz(func(t *testing.T, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := Decode(body, lim)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > maxAlloc {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(body), n)
		}
		if err == nil {
			if err := p.CheckValid(); err != nil {
				t.Fatalf("decoded an invalid profile: %v", err)
			}
		} else if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v is neither ErrTooLarge nor ErrInvalid", err)
		}
	})
}
