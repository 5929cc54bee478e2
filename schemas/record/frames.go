package record

// Frames the agent names itself travel as pprof locations whose mapping
// file is one of these pseudo-files, with HasFunctions set and the
// location's lines filled: the symbolizer passes them through untouched.
// Every other mapping is native code, named by the symbolizer.
const (
	MappingKernel = "[kernel.kallsyms]" // kernel functions, from kallsyms
	MappingPython = "[python]"          // CPython: function co_qualname, file co_filename, line
	MappingJava   = "[java]"            // HotSpot: function pkg.Class.method, file the source file (none from ingest's JFR)
	MappingJS     = "[js]"              // V8: function name or "(anonymous)", file the script URL
	MappingJIT    = "[jit]"             // a perf map's entry in a runtime not known to be one of the above
)

// Frame kinds, as stored with each frame and shown by the UI.
const (
	KindNative = "native"
	KindKernel = "kernel"
	KindPython = "python"
	KindJava   = "java"
	KindJS     = "js"
	KindJIT    = "jit"
)

// FrameKind is the kind of a frame from its mapping file.
func FrameKind(mappingFile string) string {
	switch mappingFile {
	case MappingKernel:
		return KindKernel
	case MappingPython:
		return KindPython
	case MappingJava:
		return KindJava
	case MappingJS:
		return KindJS
	case MappingJIT:
		return KindJIT
	}
	return KindNative
}
