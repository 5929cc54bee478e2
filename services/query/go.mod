module github.com/stackstream/stackstream/services/query

go 1.26
