// Package selector parses Prometheus-style label selectors such as
// {service="checkout",host=~"web-.*"} and turns them into OpenSearch query
// clauses built as Go values, so user input never becomes DSL text.
package selector

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
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

// MaxLength bounds the selector text so a request cannot make us build huge queries.
const MaxLength = 4096

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
	for {
		p.space()
		if p.eat("}") {
			break
		}
		m, err := p.matcher()
		if err != nil {
			return nil, err
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
		if _, err := regexp.Compile("^(?:" + value + ")$"); err != nil {
			return Matcher{}, fmt.Errorf("%w: label %s: regular expression %q: %v", ErrSyntax, name, value, err)
		}
		if _, err := toLucene(value); err != nil {
			return Matcher{}, fmt.Errorf("%w: label %s: regular expression %q: %v", ErrSyntax, name, value, err)
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

// Field is the OpenSearch field holding label name: service, host and type
// are top-level fields, every other label lives under labels.
func Field(name string) string {
	switch name {
	case "service", "host", "type":
		return name
	}
	return "labels." + name
}

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
func (s Selector) Clauses() (filter, mustNot []any) {
	for _, m := range s {
		field := Field(m.Name)
		exists := map[string]any{"exists": map[string]any{"field": field}}
		switch m.Op {
		case Equal:
			if m.Value == "" {
				mustNot = append(mustNot, exists)
			} else {
				filter = append(filter, term(field, m.Value))
			}
		case NotEqual:
			if m.Value == "" {
				filter = append(filter, exists)
			} else {
				mustNot = append(mustNot, term(field, m.Value))
			}
		case Regexp:
			re := regexpQuery(field, m.Value)
			if matchesEmpty(m.Value) {
				filter = append(filter, map[string]any{"bool": map[string]any{
					"should":               []any{re, map[string]any{"bool": map[string]any{"must_not": []any{exists}}}},
					"minimum_should_match": 1,
				}})
			} else {
				filter = append(filter, re)
			}
		case NotRegexp:
			mustNot = append(mustNot, regexpQuery(field, m.Value))
			if matchesEmpty(m.Value) {
				filter = append(filter, exists)
			}
		}
	}
	return filter, mustNot
}

func term(field, value string) map[string]any {
	return map[string]any{"term": map[string]any{field: value}}
}

// regexpQuery uses Lucene's regexp query, anchored like Prometheus
// matchers, with the expression rewritten from Go's syntax (toLucene);
// flags NONE keeps Lucene's extra operators (~ & @ <>) out.
func regexpQuery(field, value string) map[string]any {
	lucene, err := toLucene(value)
	if err != nil {
		// Parse refuses these; a Selector built by hand matches literally.
		lucene = literal(value)
	}
	return map[string]any{"regexp": map[string]any{field: map[string]any{"value": lucene, "flags": "NONE"}}}
}

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
