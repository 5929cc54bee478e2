package heap

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"testing"

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

	p, err := Scrape(context.Background(), srv.Client(), Target{Service: "svc", URL: srv.URL + "/debug/pprof/heap"})
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
		if _, err := Scrape(context.Background(), srv.Client(), Target{Service: "svc", URL: srv.URL + path}); err == nil {
			t.Errorf("Scrape(%s): want an error", path)
		}
	}
}
