module github.com/stackstream/stackstream/services/query

go 1.26.0

require (
	github.com/stackstream/stackstream/pkg v0.0.0
	github.com/stackstream/stackstream/schemas v0.0.0
)

replace github.com/stackstream/stackstream/pkg => ../../pkg

replace github.com/stackstream/stackstream/schemas => ../../schemas
