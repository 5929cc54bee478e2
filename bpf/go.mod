module github.com/stackstream/stackstream/bpf

go 1.26
