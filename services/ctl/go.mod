module github.com/stackstream/stackstream/services/ctl

go 1.26.0

require (
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b
	github.com/opensearch-project/opensearch-go/v4 v4.8.1
	github.com/stackstream/stackstream/pkg v0.0.0
	github.com/stackstream/stackstream/schemas v0.0.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
)

require (
	github.com/joho/godotenv v1.5.1 // indirect
	github.com/kelseyhightower/envconfig v1.4.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	golang.org/x/sync v0.23.0 // indirect
)

replace github.com/stackstream/stackstream/pkg => ../../pkg

replace github.com/stackstream/stackstream/schemas => ../../schemas
