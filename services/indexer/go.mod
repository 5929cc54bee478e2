module github.com/stackstream/stackstream/services/indexer

go 1.26
