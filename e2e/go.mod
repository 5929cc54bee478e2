module github.com/stackstream/stackstream/e2e

go 1.26
