// Package python names CPython frames: it finds the interpreter a process
// runs (its executable or libpython, by the ELF symbols _PyRuntime,
// _PyEval_EvalFrameDefault, PyCode_Type and Py_Version), gives the BPF
// walker the layout of that version (bpf/profiler/python.h), and turns the
// code objects the walker recorded into function, file and line by reading
// the process's memory. Everything read from the process is hostile input:
// reads are bounded, pointers checked, results cached per (pid, code
// address) in a bounded LRU.
package python

import (
	"errors"
	"fmt"

	"github.com/stackstream/stackstream/bpf/profiler"
)

// Errors, checked with errors.Is.
var (
	// ErrUnsupported: a CPython version without a layout.
	ErrUnsupported = errors.New("unsupported python version")
	// ErrInvalid: memory or a file that does not hold what it should.
	ErrInvalid = errors.New("invalid python data")
	// ErrNotPython: the process runs no CPython the agent recognizes.
	ErrNotPython = errors.New("not a python process")
)

// NoOffset marks a field a version does not have.
//
//	#define PY_NO_OFFSET 65535 // 0xffff
const NoOffset = profiler.PythonNoOffset

// Version is a CPython major.minor.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Layout is where a CPython version keeps what the walker and the code
// object reader need, as byte offsets on x86-64.
type Layout struct {
	// The thread state of the sampled thread (BPF).
	RuntimeTstateCurrent uint16 // _PyRuntime.gilstate.tstate_current; NoOffset from 3.12
	RuntimeInterpHead    uint16 // _PyRuntime.interpreters.head
	InterpThreadsHead    uint16 // PyInterpreterState.threads.head
	TstateNext           uint16 // PyThreadState.next
	TstateThreadID       uint16 // PyThreadState.thread_id (pthread_self)
	TstateFrame          uint16 // PyThreadState.cframe, or current_frame from 3.13
	CframeCurrentFrame   uint16 // _PyCFrame.current_frame; NoOffset from 3.13
	// _PyInterpreterFrame (BPF).
	FrameCode    uint16 // f_code (f_executable from 3.13)
	FramePrev    uint16 // previous
	FrameInstr   uint16 // prev_instr (instr_ptr from 3.13)
	FrameIsEntry uint16 // is_entry (3.11); NoOffset: shim frames mark entries
	FrameOwner   uint16 // owner
	OwnerCStack  uint8  // FRAME_OWNED_BY_CSTACK (3.12+)
	// PyCodeObject.
	CodeFirstLine uint16 // co_firstlineno (int)
	CodeFilename  uint16 // co_filename (str)
	CodeQualname  uint16 // co_qualname (str)
	CodeLinetable uint16 // co_linetable (bytes)
	CodeUnits     uint16 // co_code_adaptive: the code units
	// str: PyASCIIObject and PyCompactUnicodeObject sizes (where the
	// characters of a compact ASCII / non-ASCII string start), length and
	// state.
	UnicodeLength  uint16
	UnicodeState   uint16
	UnicodeASCII   uint16
	UnicodeCompact uint16
	// bytes: ob_size and ob_sval.
	BytesSize uint16
	BytesData uint16
}

// Common to every supported version.
const (
	objectType = 8 // PyObject.ob_type
)

// layouts are the built-in tables, from CPython's headers of each version
// (Include/internal/pycore_frame.h, pycore_runtime.h, pycore_interp.h,
// cpython/pystate.h, cpython/code.h, cpython/unicodeobject.h) for x86-64.
// TestLayout311MatchesHeaders compiles offsetof against the installed 3.11
// headers and compares.
var layouts = map[Version]Layout{
	{3, 11}: {
		RuntimeTstateCurrent: 576, RuntimeInterpHead: 40, InterpThreadsHead: 16,
		TstateNext: 8, TstateThreadID: 152, TstateFrame: 56, CframeCurrentFrame: 8,
		FrameCode: 32, FramePrev: 48, FrameInstr: 56, FrameIsEntry: 68, FrameOwner: 69, OwnerCStack: 0xff,
		CodeFirstLine: 72, CodeFilename: 112, CodeQualname: 128, CodeLinetable: 136, CodeUnits: 184,
		UnicodeLength: 16, UnicodeState: 32, UnicodeASCII: 48, UnicodeCompact: 72,
		BytesSize: 16, BytesData: 32,
	},
}

// LayoutOf returns the built-in layout of v.
func LayoutOf(v Version) (Layout, error) {
	l, ok := layouts[v]
	if !ok {
		return Layout{}, fmt.Errorf("%w: %s", ErrUnsupported, v)
	}
	return l, nil
}

// Process is what the walker and the reader need of one CPython process.
type Process struct {
	PID       int
	Version   Version
	Layout    Layout
	Runtime   uint64 // address of _PyRuntime
	EvalStart uint64 // _PyEval_EvalFrameDefault
	EvalEnd   uint64
	// Addresses of PyCode_Type, PyUnicode_Type and PyBytes_Type: the
	// ob_type of every object read is checked against them.
	CodeType, UnicodeType, BytesType uint64
	Path                             string // the file holding the interpreter
}

// BPF is the walker's view of p (struct python_proc).
func (p *Process) BPF() profiler.ProfilePythonProc {
	l := p.Layout
	return profiler.ProfilePythonProc{
		Runtime: p.Runtime, EvalStart: p.EvalStart, EvalEnd: p.EvalEnd,
		RuntimeTstateCurrent: l.RuntimeTstateCurrent, RuntimeInterpHead: l.RuntimeInterpHead,
		InterpThreadsHead: l.InterpThreadsHead, TstateNext: l.TstateNext, TstateThreadId: l.TstateThreadID,
		TstateFrame: l.TstateFrame, CframeCurrentFrame: l.CframeCurrentFrame,
		FrameCode: l.FrameCode, FramePrevious: l.FramePrev, FrameInstr: l.FrameInstr,
		FrameIsEntry: l.FrameIsEntry, FrameOwner: l.FrameOwner, CodeUnits: l.CodeUnits, OwnerCstack: l.OwnerCStack,
	}
}

// Frame is a Python frame the walker recorded.
type Frame struct {
	Code  uint64 // address of the code object
	Instr int    // index of the code unit executing (saturated at profiler.PythonInstrMax)
}

// IsFrame reports whether a value of an unwound stack is a Python frame.
func IsFrame(v uint64) bool { return v&profiler.PythonFrameFlag != 0 }

// DecodeFrame splits a Python frame of an unwound stack.
func DecodeFrame(v uint64) Frame {
	return Frame{
		Code:  (v & profiler.PythonCodeMask) << 3,
		Instr: int(v>>profiler.PythonInstrShift) & profiler.PythonInstrMax,
	}
}
