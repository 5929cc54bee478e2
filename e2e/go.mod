module github.com/stackstream/stackstream/e2e

go 1.26.0

require (
	github.com/stackstream/stackstream/pkg v0.0.0
	github.com/twmb/franz-go/pkg/kadm v1.20.0
)

require (
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/stackstream/stackstream/schemas v0.0.0 // indirect
	github.com/twmb/franz-go v1.22.3 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)

replace github.com/stackstream/stackstream/pkg => ../pkg

replace github.com/stackstream/stackstream/schemas => ../schemas
