module github.com/stackstream/stackstream/services/symbolizer

go 1.26
