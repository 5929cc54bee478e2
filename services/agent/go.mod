module github.com/stackstream/stackstream/services/agent

go 1.26
