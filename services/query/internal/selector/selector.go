// Package selector parses Prometheus-style label selectors such as
// {service="checkout",host=~"web-.*"} and turns them into OpenSearch query
// clauses built as Go values, so user input never becomes DSL text.
package selector

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stackstream/stackstream/schemas/record"
)

// Op is a matcher's comparison.
type Op string

// The four matcher operators of Prometheus.
const (
	Equal     Op = "="
	NotEqual  Op = "!="
	Regexp    Op = "=~"
	NotRegexp Op = "!~"
)

// Matcher compares one label with a value.
type Matcher struct {
	Name  string
	Op    Op
	Value string
}

// Selector is a conjunction of matchers; empty selects everything.
type Selector []Matcher

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("bad selector")

// Bounds of one selector, so a request cannot make us build huge queries:
// every matcher becomes up to four OpenSearch clauses (two for labels
// outside the contract), each regular expression an automaton.
const (
	// MaxLength fits a list of MaxValues host names of about 25 bytes
	// (host=~"web-1|web-2|..."); through GET the URL limit (32 KiB) comes
	// first, a POST form carries the rest.
	MaxLength   = 256 << 10
	MaxMatchers = 32
	// MaxValues bounds the values of a selector's lists (=~ or !~ of
	// literals separated by |), each a terms query: far below OpenSearch's
	// index.max_terms_count (65536), and a few hundred KB of query.
	MaxValues = 10000
	// MaxRegexpLength is OpenSearch's index.max_regex_length default: a
	// longer regexp query fails on the node. It bounds an expression in
	// Lucene's syntax, where (?i) and repetitions grow (x{100} is 100 x).
	MaxRegexpLength = 1000
)

// Parse reads s. Whitespace is allowed around tokens; "" and "{}" select everything.
func Parse(s string) (Selector, error) {
	if len(s) > MaxLength {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrSyntax, MaxLength)
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrSyntax)
	}
	p := parser{s: s}
	p.space()
	if p.done() {
		return nil, nil
	}
	if !p.eat("{") {
		return nil, p.errorf("expected { at the start, as in {service=\"checkout\"}")
	}
	var sel Selector
	values := 0
	for {
		p.space()
		if p.eat("}") {
			break
		}
		m, err := p.matcher()
		if err != nil {
			return nil, err
		}
		if list, ok := Values(m); ok {
			if values += len(list); values > MaxValues {
				return nil, p.errorf("lists of more than %d values in all: select by a pattern such as host=~\"web-.*\" or by a label instead", MaxValues)
			}
		}
		if len(sel) == MaxMatchers {
			return nil, p.errorf("more than %d matchers: select with fewer labels", MaxMatchers)
		}
		sel = append(sel, m)
		p.space()
		if p.eat(",") {
			continue
		}
		if p.eat("}") {
			break
		}
		return nil, p.errorf("expected , or } after %s%s%q", m.Name, m.Op, m.Value)
	}
	p.space()
	if !p.done() {
		return nil, p.errorf("unexpected text after }")
	}
	return sel, nil
}

type parser struct {
	s   string
	pos int
}

func (p *parser) done() bool { return p.pos >= len(p.s) }

func (p *parser) space() {
	for !p.done() && strings.IndexByte(" \t\r\n", p.s[p.pos]) >= 0 {
		p.pos++
	}
}

func (p *parser) eat(tok string) bool {
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrSyntax, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) matcher() (Matcher, error) {
	start := p.pos
	for !p.done() && isNameByte(p.s[p.pos], p.pos == start) {
		p.pos++
	}
	name := p.s[start:p.pos]
	if name == "" {
		return Matcher{}, p.errorf("expected a label name such as service, host or k8s_pod")
	}
	if !record.ValidLabelKey(name) {
		p.pos = start
		return Matcher{}, p.errorf("label name %q: use letters, digits and _ (not first), at most %d bytes", truncate(name, 80), record.MaxLabelKeyBytes)
	}
	p.space()
	var op Op
	switch {
	case p.eat("=~"):
		op = Regexp
	case p.eat("!~"):
		op = NotRegexp
	case p.eat("!="):
		op = NotEqual
	case p.eat("="):
		op = Equal
	default:
		return Matcher{}, p.errorf("expected =, !=, =~ or !~ after %s", name)
	}
	p.space()
	value, err := p.quoted()
	if err != nil {
		return Matcher{}, err
	}
	if op == Regexp || op == NotRegexp {
		if _, ok := literals(value); ok {
			// A list of names: a terms query, no automaton.
			return Matcher{Name: name, Op: op, Value: value}, nil
		}
		if _, err := regexp.Compile("^(?:" + value + ")$"); err != nil {
			return Matcher{}, fmt.Errorf("%w: label %s: regular expression %q: %v", ErrSyntax, name, truncate(value, 200), err)
		}
		lucene, err := toLucene(value)
		if err != nil {
			return Matcher{}, fmt.Errorf("%w: label %s: regular expression %q: %v", ErrSyntax, name, truncate(value, 200), err)
		}
		if InPairs(name) {
			lucene = PairsRegexp(name, lucene)
		}
		if len(lucene) > MaxRegexpLength {
			return Matcher{}, fmt.Errorf("%w: label %s: regular expression %q is %d characters in OpenSearch's syntax (repetitions and (?i) expanded), more than %d: simplify it",
				ErrSyntax, name, truncate(value, 200), len(lucene), MaxRegexpLength)
		}
	}
	return Matcher{Name: name, Op: op, Value: value}, nil
}

// quoted reads a "double", 'single' or `raw` quoted string with Go escapes.
func (p *parser) quoted() (string, error) {
	if p.done() {
		return "", p.errorf("expected a quoted value")
	}
	q := p.s[p.pos]
	if q != '"' && q != '\'' && q != '`' {
		return "", p.errorf("expected a quoted value, as in \"checkout\"")
	}
	start := p.pos
	p.pos++
	for !p.done() {
		c := p.s[p.pos]
		if c == '\\' && q != '`' {
			p.pos += 2
			continue
		}
		p.pos++
		if c == q {
			raw := p.s[start:p.pos]
			if q == '\'' {
				// Go's Unquote reads single quotes as a rune: swap them for double quotes.
				raw = `"` + strings.ReplaceAll(raw[1:len(raw)-1], `"`, `\"`) + `"`
			}
			v, err := strconv.Unquote(raw)
			if err != nil {
				return "", fmt.Errorf("%w at offset %d: bad escape in %s", ErrSyntax, start, p.s[start:p.pos])
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("%w at offset %d: unterminated quoted value", ErrSyntax, start)
}

func isNameByte(c byte, first bool) bool {
	switch {
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return true
	case c >= '0' && c <= '9' || c == '.' || c == '-':
		return !first
	}
	return false
}

// String prints the selector in the syntax Parse reads.
func (s Selector) String() string {
	parts := make([]string, len(s))
	for i, m := range s {
		parts[i] = m.Name + string(m.Op) + strconv.Quote(m.Value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Fields of the samples index for labels outside record.ContractLabels
// (schemas/opensearch.md): "name=value" pairs and the names alone. Documents
// written before them keep every label as labels.<name>.
const (
	PairsField = "label_pairs"
	NamesField = "label_names"
)

// Field is the OpenSearch field holding label name: service, host and type
// are top-level fields, every other label lives under labels (for labels
// outside the contract, only in documents written before PairsField).
func Field(name string) string {
	switch name {
	case "service", "host", "type":
		return name
	}
	return "labels." + name
}

// InPairs reports whether label name is kept in PairsField and NamesField
// (and in Field(name) by older documents): every label but service, host,
// type and record.ContractLabels.
func InPairs(name string) bool {
	switch name {
	case "service", "host", "type":
		return false
	}
	return !record.IsContractLabel(name)
}

// Pair is the PairsField value of a label.
func Pair(name, value string) string { return name + "=" + value }

// PairsRegexp is the Lucene regular expression selecting the PairsField
// values of label name whose value matches lucene (already Lucene syntax).
func PairsRegexp(name, lucene string) string { return literal(name+"=") + "(" + lucene + ")" }

// OnlyFields reports whether every matcher names one of fields, so the
// selector can run against an index (the rollups) that only has those.
func (s Selector) OnlyFields(fields ...string) bool {
	for _, m := range s {
		found := false
		for _, f := range fields {
			if m.Name == f {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Clauses returns the selector as bool-query parts: filter clauses (all must
// match) and must_not clauses. Like Prometheus, a missing label equals "".
// A label outside the contract is matched in both forms a document may have
// it in: labels.<name> (older documents) or PairsField/NamesField.
func (s Selector) Clauses() (filter, mustNot []any) {
	for _, m := range s {
		field := Field(m.Name)
		pairs := InPairs(m.Name)
		// has matches documents with the label, in either form; absent
		// lists clauses of which none may match for the label to be missing.
		has := exists(field)
		absent := []any{has}
		if pairs {
			byName := term(NamesField, m.Name)
			has = anyOf(has, byName)
			absent = append(absent, byName)
		}
		equal := term(field, m.Value)
		if pairs {
			equal = anyOf(equal, term(PairsField, Pair(m.Name, m.Value)))
		}
		switch m.Op {
		case Equal:
			if m.Value == "" {
				mustNot = append(mustNot, absent...)
			} else {
				filter = append(filter, equal)
			}
		case NotEqual:
			if m.Value == "" {
				filter = append(filter, has)
			} else {
				mustNot = append(mustNot, equal)
			}
		case Regexp:
			re := regexpClause(m.Name, field, pairs, m.Value)
			if list, ok := Values(m); ok {
				re = termsClause(m.Name, field, pairs, list)
			}
			if matchesEmpty(m.Value) {
				filter = append(filter, anyOf(re, map[string]any{"bool": map[string]any{"must_not": absent}}))
			} else {
				filter = append(filter, re)
			}
		case NotRegexp:
			if list, ok := Values(m); ok {
				mustNot = append(mustNot, termsClause(m.Name, field, pairs, list))
			} else {
				mustNot = append(mustNot, regexpClause(m.Name, field, pairs, m.Value))
			}
			if matchesEmpty(m.Value) {
				filter = append(filter, has)
			}
		}
	}
	return filter, mustNot
}

func exists(field string) map[string]any {
	return map[string]any{"exists": map[string]any{"field": field}}
}

// anyOf matches documents matching any of the clauses.
func anyOf(clauses ...any) map[string]any {
	return map[string]any{"bool": map[string]any{"should": clauses, "minimum_should_match": 1}}
}

// regexpClause matches label name's value against the Go expression value,
// in labels.<name> and, for labels outside the contract, in PairsField.
func regexpClause(name, field string, pairs bool, value string) map[string]any {
	lucene, err := toLucene(value)
	if err != nil {
		// Parse refuses these; a Selector built by hand matches literally.
		lucene = literal(value)
	}
	re := regexpQuery(field, lucene)
	if !pairs {
		return re
	}
	return anyOf(re, regexpQuery(PairsField, PairsRegexp(name, lucene)))
}

// Values returns the names a =~ or !~ matcher lists, when its expression
// is only literals separated by | (host=~"web-1|web-2"): the form a host
// picker or a dashboard variable writes. Such a matcher is a terms query.
func Values(m Matcher) ([]string, bool) {
	if m.Op != Regexp && m.Op != NotRegexp {
		return nil, false
	}
	return literals(m.Value)
}

// literals splits expr on | into two or more non-empty literal strings (Go
// escapes of punctuation allowed), or reports false if any part is empty
// or more than a literal, or the expression is case-insensitive, grouped
// or quoted.
func literals(expr string) ([]string, bool) {
	if strings.ContainsAny(expr, "()[]") || strings.Contains(expr, `\Q`) {
		return nil, false
	}
	var parts []string
	start := 0
	for i := 0; i <= len(expr); i++ {
		if i < len(expr) && expr[i] == '\\' {
			i++
			continue
		}
		if i == len(expr) || expr[i] == '|' {
			parts = append(parts, expr[start:min(i, len(expr))])
			start = i + 1
		}
	}
	if len(parts) < 2 {
		return nil, false // one literal: a regexp query costs no more
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil || re.Op != syntax.OpLiteral || re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		out = append(out, string(re.Rune))
	}
	return out, true
}

// termsClause matches label name's value against any of values, in
// labels.<name> and, for labels outside the contract, in PairsField.
func termsClause(name, field string, pairs bool, values []string) map[string]any {
	t := map[string]any{"terms": map[string]any{field: values}}
	if !pairs {
		return t
	}
	pv := make([]string, len(values))
	for i, v := range values {
		pv[i] = Pair(name, v)
	}
	return anyOf(t, map[string]any{"terms": map[string]any{PairsField: pv}})
}

// LuceneRegexp is a Go (RE2) expression in the syntax of OpenSearch's
// regexp query and terms include (see toLucene).
func LuceneRegexp(expr string) (string, error) { return toLucene(expr) }

func term(field, value string) map[string]any {
	return map[string]any{"term": map[string]any{field: value}}
}

// regexpQuery uses Lucene's regexp query, anchored like Prometheus
// matchers, with an expression already rewritten from Go's syntax
// (toLucene); flags NONE keeps Lucene's extra operators (~ & @ <>) out.
func regexpQuery(field, lucene string) map[string]any {
	return map[string]any{"regexp": map[string]any{field: map[string]any{"value": lucene, "flags": "NONE"}}}
}

// Literal is s as a Lucene regular expression matching s only.
func Literal(s string) string { return literal(s) }

func literal(s string) string {
	var b strings.Builder
	for _, r := range s {
		writeRune(&b, r)
	}
	return b.String()
}

func matchesEmpty(value string) bool {
	re, err := regexp.Compile("^(?:" + value + ")$")
	return err == nil && re.MatchString("")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
