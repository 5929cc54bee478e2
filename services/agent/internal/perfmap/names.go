package perfmap

import (
	"strconv"
	"strings"
)

// Runtime is what wrote a process's perf map, as far as the agent can tell
// from its mappings and executable.
type Runtime int

const (
	RuntimeUnknown Runtime = iota
	RuntimeJava            // HotSpot: libjvm.so is mapped
	RuntimeNode            // V8 in node: the executable is node, or libnode is mapped
)

// Kind says which language a perf map entry names.
type Kind int

const (
	KindJIT    Kind = iota // a runtime not known to be one below
	KindJava               // HotSpot
	KindJS                 // V8
	KindPython             // CPython 3.12+ -X perf trampolines
)

// Frame is a perf map entry turned into a function, its source file and
// line where the entry says them.
type Frame struct {
	Kind       Kind
	Function   string
	SystemName string // the entry as written
	File       string
	Line       int64
	Column     int64
}

// Symbolize turns the name of an entry of a process running rt into a frame.
func Symbolize(rt Runtime, name string) Frame {
	if f, ok := pythonFrame(name); ok {
		return f
	}
	switch rt {
	case RuntimeJava:
		return javaFrame(name)
	case RuntimeNode:
		return jsFrame(name)
	}
	return Frame{Kind: KindJIT, Function: name, SystemName: name}
}

// pythonFrame parses CPython's "py::qualname:/path/file.py" (3.12+, -X perf
// or PYTHONPERFSUPPORT). The qualified name holds no ':', the path may.
func pythonFrame(name string) (Frame, bool) {
	rest, ok := strings.CutPrefix(name, "py::")
	if !ok {
		return Frame{}, false
	}
	fn, file, _ := strings.Cut(rest, ":")
	if fn == "" {
		fn = "<unknown>"
	}
	return Frame{Kind: KindPython, Function: fn, SystemName: name, File: file}, true
}

// javaFrame parses HotSpot's "long pkg.Class.method(long, int)" (the
// return type, the method and its argument types). Other entries are the
// VM's own code ("Interpreter", "StubRoutines (1)", "I2C/C2I adapters"):
// kept as they are.
func javaFrame(name string) Frame {
	f := Frame{Kind: KindJava, Function: name, SystemName: name}
	open := strings.IndexByte(name, '(')
	if open <= 0 || !strings.HasSuffix(name, ")") {
		return f
	}
	method := name[:open]
	if i := strings.LastIndexByte(method, ' '); i >= 0 {
		method = method[i+1:]
	}
	// A method is qualified by its class: a '.' before the method name, and
	// no space between it and its arguments.
	if method == "" || !strings.Contains(method, ".") || name[open-1] == ' ' {
		return f
	}
	f.Function = method
	return f
}

// v8Prefixes are the code kinds V8 writes before a JavaScript function's
// name ("JS:" since V8 11, the others before).
var v8Prefixes = []string{"JS:", "LazyCompile:", "Function:", "Script:", "Eval:", "InterpretedFunction:"}

// jsFrame parses V8's "JS:*name file:line:col": the tier marker (* optimized,
// ^ Maglev, + Sparkplug, ~ not optimized) is dropped, an empty name is the
// anonymous function, the last field is the script URL with line and column.
// Other entries (Builtin:..., BytecodeHandler:..., Stub:..., RegExp:...) are
// kept as they are.
func jsFrame(name string) Frame {
	f := Frame{Kind: KindJS, Function: name, SystemName: name}
	rest := ""
	ok := false
	for _, p := range v8Prefixes {
		if rest, ok = strings.CutPrefix(name, p); ok {
			break
		}
	}
	if !ok {
		return f
	}
	rest = strings.TrimLeft(rest, "*^+~")
	fn, loc := rest, ""
	if i := strings.LastIndexByte(rest, ' '); i >= 0 {
		fn, loc = rest[:i], rest[i+1:]
	}
	if file, line, col, ok := jsLocation(loc); ok {
		f.File, f.Line, f.Column = file, line, col
	} else {
		fn = rest
	}
	fn = strings.TrimSpace(fn)
	if fn == "" {
		fn = "(anonymous)"
	}
	f.Function = fn
	return f
}

// jsLocation parses "url:line:col" or "url:line" (the URL itself may hold
// ':').
func jsLocation(loc string) (file string, line, col int64, ok bool) {
	last := func(s string) (string, int64, bool) {
		i := strings.LastIndexByte(s, ':')
		if i <= 0 {
			return s, 0, false
		}
		n, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil || n < 0 {
			return s, 0, false
		}
		return s[:i], n, true
	}
	rest, n, ok := last(loc)
	if !ok {
		return "", 0, 0, false
	}
	if rest2, m, ok := last(rest); ok {
		return rest2, m, n, true
	}
	return rest, n, 0, true
}
