module github.com/stackstream/stackstream/services/rollup

go 1.26
