module github.com/stackstream/stackstream/services/ctl

go 1.26
