package selector

import (
	"fmt"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode"
)

// toLucene rewrites a Go (RE2, as Prometheus users write) regular
// expression into the Lucene syntax of OpenSearch's regexp query, so both
// match the same strings: Lucene reads (?i), ^, $ and [[:digit:]] as
// literals or errors, and "\s" in Lucene is whitespace even where RE2 would
// reject it. The expression is parsed with Go's parser and emitted from its
// syntax tree: literals are escaped, case folding becomes character
// classes, and anchors vanish because both sides match whole values.
func toLucene(expr string) (string, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := emit(&b, re.Simplify()); err != nil {
		return "", err
	}
	return b.String(), nil
}

func emit(b *strings.Builder, re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpNoMatch:
		return fmt.Errorf("%q matches nothing", re.String())
	case syntax.OpEmptyMatch:
		b.WriteString("()")
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && unicode.SimpleFold(r) != r {
				folds := []rune{r}
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					folds = append(folds, f)
				}
				b.WriteByte('[')
				for _, f := range folds {
					writeRune(b, f)
				}
				b.WriteByte(']')
				continue
			}
			writeRune(b, r)
		}
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return fmt.Errorf("%q matches nothing", re.String())
		}
		b.WriteByte('[')
		for i := 0; i+1 < len(re.Rune); i += 2 {
			writeRune(b, re.Rune[i])
			if re.Rune[i+1] != re.Rune[i] {
				b.WriteByte('-')
				writeRune(b, re.Rune[i+1])
			}
		}
		b.WriteByte(']')
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte('.')
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		// Matchers are anchored to the whole value on both sides.
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return fmt.Errorf(`word boundaries (\b, \B) are not supported`)
	case syntax.OpCapture:
		b.WriteByte('(')
		if err := emit(b, re.Sub[0]); err != nil {
			return err
		}
		b.WriteByte(')')
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		b.WriteByte('(')
		if err := emit(b, re.Sub[0]); err != nil {
			return err
		}
		b.WriteByte(')')
		switch re.Op {
		case syntax.OpStar:
			b.WriteByte('*')
		case syntax.OpPlus:
			b.WriteByte('+')
		case syntax.OpQuest:
			b.WriteByte('?')
		default:
			b.WriteString("{" + strconv.Itoa(re.Min))
			if re.Max != re.Min {
				b.WriteByte(',')
				if re.Max >= 0 {
					b.WriteString(strconv.Itoa(re.Max))
				}
			}
			b.WriteByte('}')
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if err := emit(b, sub); err != nil {
				return err
			}
		}
	case syntax.OpAlternate:
		b.WriteByte('(')
		for i, sub := range re.Sub {
			if i > 0 {
				b.WriteByte('|')
			}
			if err := emit(b, sub); err != nil {
				return err
			}
		}
		b.WriteByte(')')
	default:
		return fmt.Errorf("unsupported regular expression %q", re.String())
	}
	return nil
}

// writeRune writes r literally: ASCII letters and digits as they are
// (Lucene reads "\d", "\s", "\w" as classes), other ASCII escaped with a
// backslash, everything else as it is.
func writeRune(b *strings.Builder, r rune) {
	switch {
	case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'):
		b.WriteRune(r)
	case r < 0x80:
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		b.WriteRune(r)
	}
}
