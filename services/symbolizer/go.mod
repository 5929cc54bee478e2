module github.com/stackstream/stackstream/services/symbolizer

go 1.26.0

require github.com/stackstream/stackstream/schemas v0.0.0

require github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724

replace github.com/stackstream/stackstream/pkg => ../../pkg

replace github.com/stackstream/stackstream/schemas => ../../schemas
