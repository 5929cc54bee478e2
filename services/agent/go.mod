module github.com/stackstream/stackstream/services/agent

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/stackstream/stackstream/bpf v0.0.0
	github.com/stackstream/stackstream/schemas v0.0.0
	golang.org/x/sys v0.48.0
)

require golang.org/x/sync v0.23.0 // indirect

replace github.com/stackstream/stackstream/pkg => ../../pkg

replace github.com/stackstream/stackstream/schemas => ../../schemas

replace github.com/stackstream/stackstream/bpf => ../../bpf
