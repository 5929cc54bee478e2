package selector

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Selector
	}{
		{"empty", "", nil},
		{"braces only", " { } ", nil},
		{"equal", `{service="checkout"}`, Selector{{"service", Equal, "checkout"}}},
		{"all ops", `{service="a", host!="b",k8s_pod=~"web-.*" , comm!~'x|y',}`, Selector{
			{"service", Equal, "a"}, {"host", NotEqual, "b"}, {"k8s_pod", Regexp, "web-.*"}, {"comm", NotRegexp, "x|y"},
		}},
		{"escapes", `{service="a\"b\\c"}`, Selector{{"service", Equal, `a"b\c`}}},
		{"single quote with double inside", `{service='a"b'}`, Selector{{"service", Equal, `a"b`}}},
		{"raw", "{service=`a\\b`}", Selector{{"service", Equal, `a\b`}}},
		{"dotted name", `{k8s.pod="x"}`, Selector{{"k8s.pod", Equal, "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no brace", `service="a"`, "expected {"},
		{"unterminated", `{service="a}`, "unterminated"},
		{"no op", `{service}`, "expected =, !=, =~ or !~"},
		{"unquoted", `{service=a}`, "expected a quoted value"},
		{"no name", `{="a"}`, "expected a label name"},
		{"missing comma", `{service="a" host="b"}`, "expected , or }"},
		{"trailing", `{service="a"} x`, "unexpected text"},
		{"bad regexp", `{host=~"web-("}`, "regular expression"},
		{"bad escape", `{host="\q"}`, "bad escape"},
		{"not closed", `{service="a",`, "expected a label name"},
		{"too long", "{" + strings.Repeat(" ", MaxLength) + "}", "longer than"},
		{"invalid utf8", "{service=\"\xff\"}", "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want error containing %q", tc.in, tc.want)
			}
			if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want ErrSyntax containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestClauses(t *testing.T) {
	sel, err := Parse(`{service="checkout",host!="b",k8s_pod=~"web-.*",comm!~"x",unit="",zone!="",rack=~"r1|"}`)
	if err != nil {
		t.Fatal(err)
	}
	filter, mustNot := sel.Clauses()
	got, _ := json.Marshal(map[string]any{"filter": filter, "must_not": mustNot})
	want := `{"filter":[{"term":{"service":"checkout"}},` +
		`{"regexp":{"labels.k8s_pod":{"flags":"NONE","value":"web\\-(.)*"}}},` +
		`{"exists":{"field":"labels.zone"}},` +
		`{"bool":{"minimum_should_match":1,"should":[{"regexp":{"labels.rack":{"flags":"NONE","value":"(r1|())"}}},{"bool":{"must_not":[{"exists":{"field":"labels.rack"}}]}}]}}],` +
		`"must_not":[{"term":{"host":"b"}},{"regexp":{"labels.comm":{"flags":"NONE","value":"x"}}},{"exists":{"field":"labels.unit"}}]}`
	if string(got) != want {
		t.Fatalf("clauses\n got %s\nwant %s", got, want)
	}
	if sel.OnlyFields("service", "host") {
		t.Fatal("OnlyFields(service, host) = true for a selector with labels")
	}
	if s, _ := Parse(`{service="a",host="b"}`); !s.OnlyFields("service", "host") {
		t.Fatal("OnlyFields(service, host) = false for a service/host selector")
	}
}

func TestToLucene(t *testing.T) {
	tests := []struct{ in, want string }{
		{`web-.*`, `web\-(.)*`},
		{`(?i)Web`, `[Ww][Ee][Bb]`},
		{`^web-1$`, `web\-1`},
		{`web-\d+`, `web\-([0-9])+`},
		{`[[:digit:]]`, `[0-9]`},
		{`a\.b|c`, `(a\.b|c)`},
		{`x\sy`, "x[\\\t-\\\n\\\f-\\\r\\ ]y"},
		{`a{2,3}b{2,}c{4}`, `aa(a)?b(b)+cccc`},
		{`é"q`, `é\"q`},
		{`a|`, `(a|())`},
	}
	for _, tc := range tests {
		got, err := toLucene(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("toLucene(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := Parse(`{host=~"\\bweb"}`); err == nil || !strings.Contains(err.Error(), "word boundaries") {
		t.Errorf(`\b accepted: %v`, err)
	}
}

func TestStringRoundTrip(t *testing.T) {
	in := `{service="a\"b",host=~"web-.*",k8s_pod!~"x",comm!="y"}`
	sel, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if sel.String() != in {
		t.Fatalf("String() = %s, want %s", sel.String(), in)
	}
}

// FuzzParse checks that any input either fails with ErrSyntax or parses into
// a selector that prints back to text parsing to the same selector, and that
// building clauses never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "{}", `{service="checkout",host=~"web-.*"}`, `{a!~'x',b!=""}`, "{a=`\\`}", `{a="\u00e9\n"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSyntax", s, err)
			}
			return
		}
		sel.Clauses()
		if len(sel) == 0 {
			return
		}
		again, err := Parse(sel.String())
		if err != nil {
			t.Fatalf("Parse(String()) of %q = %q: %v", s, sel.String(), err)
		}
		if !reflect.DeepEqual(sel, again) {
			t.Fatalf("round trip of %q: %#v != %#v", s, sel, again)
		}
	})
}
