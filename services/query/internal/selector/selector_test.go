package selector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
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
		{"longest regexp", `{comm=~"a{1000}"}`, Selector{{"comm", Regexp, "a{1000}"}}},
		{"longest name", "{" + strings.Repeat("a", 64) + `="x"}`, Selector{{strings.Repeat("a", 64), Equal, "x"}}},
		{"most matchers", "{" + strings.Repeat(`a="x",`, MaxMatchers) + "}", slices.Repeat(Selector{{"a", Equal, "x"}}, MaxMatchers)},
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
		{"dotted name", `{k8s.pod="x"}`, `label name "k8s.pod": use letters, digits and _`},
		{"dashed name", `{a-b="x"}`, `label name "a-b"`},
		{"name too long", "{" + strings.Repeat("a", 65) + `="x"}`, "at most 64 bytes"},
		{"regexp too long for opensearch", `{comm=~"(?i)k{300}"}`, "more than 1000"},
		{"regexp with the pair prefix too long", `{team=~"a{995}"}`, "1003 characters"},
		{"too many matchers", "{" + strings.Repeat(`a="x",`, MaxMatchers+1) + "}", "more than 32 matchers"},
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
	// comm and k8s_pod are contract labels (labels.<name> only); zone,
	// rack, unit and team are not: older documents hold them as
	// labels.<name>, newer ones in label_pairs and label_names.
	sel, err := Parse(`{service="checkout",host!="b",k8s_pod=~"web-.*",comm!~"x",unit="",zone!="",rack=~"r1|",team="a",team!="b",team!~"c.d"}`)
	if err != nil {
		t.Fatal(err)
	}
	filter, mustNot := sel.Clauses()
	got, _ := json.MarshalIndent(map[string]any{"filter": filter, "must_not": mustNot}, "", " ")
	want := `{
 "filter": [
  {"term": {"service": "checkout"}},
  {"regexp": {"labels.k8s_pod": {"flags": "NONE", "value": "web\\-(.)*"}}},
  {"bool": {"minimum_should_match": 1, "should": [
     {"exists": {"field": "labels.zone"}},
     {"term": {"label_names": "zone"}}]}},
  {"bool": {"minimum_should_match": 1, "should": [
     {"bool": {"minimum_should_match": 1, "should": [
        {"regexp": {"labels.rack": {"flags": "NONE", "value": "(r1|())"}}},
        {"regexp": {"label_pairs": {"flags": "NONE", "value": "rack\\=((r1|()))"}}}]}},
     {"bool": {"must_not": [
        {"exists": {"field": "labels.rack"}},
        {"term": {"label_names": "rack"}}]}}]}},
  {"bool": {"minimum_should_match": 1, "should": [
     {"term": {"labels.team": "a"}},
     {"term": {"label_pairs": "team=a"}}]}}
 ],
 "must_not": [
  {"term": {"host": "b"}},
  {"regexp": {"labels.comm": {"flags": "NONE", "value": "x"}}},
  {"exists": {"field": "labels.unit"}},
  {"term": {"label_names": "unit"}},
  {"bool": {"minimum_should_match": 1, "should": [
     {"term": {"labels.team": "b"}},
     {"term": {"label_pairs": "team=b"}}]}},
  {"bool": {"minimum_should_match": 1, "should": [
     {"regexp": {"labels.team": {"flags": "NONE", "value": "c.d"}}},
     {"regexp": {"label_pairs": {"flags": "NONE", "value": "team\\=(c.d)"}}}]}}
 ]
}`
	if compact(t, string(got)) != compact(t, want) {
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

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %s: %v", s, err)
	}
	return b.String()
}

// TestValues: =~ and !~ of two or more literals separated by | are lists
// (terms queries, no regexp length bound); anything else stays a regexp.
func TestValues(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // nil: not a list
	}{
		{`web-1|web-2`, []string{"web-1", "web-2"}},
		{`web\.1|web\.2|a\|b`, []string{"web.1", "web.2", "a|b"}},
		{`é|ü`, []string{"é", "ü"}},
		{`web-1`, nil},
		{`a|`, nil},
		{`a.b|c`, nil},
		{`(?i)a|b`, nil},
		{`(a|b)`, nil},
		{`[ab]|c`, nil},
		{`\Qa|b\E`, nil},
		{`a*|b`, nil},
	} {
		got, ok := Values(Matcher{Name: "host", Op: Regexp, Value: tc.expr})
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("Values(%q) = %q, %v; want %q", tc.expr, got, ok, tc.want)
		}
	}
	if _, ok := Values(Matcher{Name: "host", Op: Equal, Value: "a|b"}); ok {
		t.Error("= is never a list")
	}
	names := make([]string, MaxValues)
	for i := range names {
		names[i] = fmt.Sprintf("host-%05d", i)
	}
	long := `{host=~"` + strings.Join(names, "|") + `"}`
	sel, err := Parse(long)
	if err != nil || len(sel) != 1 {
		t.Fatalf("%d listed hosts (%d bytes): %v", MaxValues, len(long), err)
	}
	filter, _ := sel.Clauses()
	if got, _ := json.Marshal(filter); !strings.HasPrefix(string(got), `[{"terms":{"host":["host-00000","host-00001",`) {
		t.Fatalf("clauses %.100s, want a terms query", got)
	}
	if _, err := Parse(`{host=~"` + strings.Join(names, "|") + `|one-more"}`); err == nil || !strings.Contains(err.Error(), "more than 10000 values") {
		t.Fatalf("%d values: %v, want the bound", MaxValues+1, err)
	}
}
