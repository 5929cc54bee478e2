# stackstream: see README.md. Every target works on a fresh clone.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export GOFLAGS ?= -buildvcs=false

BIN := bin
# The release every binary reports (-h, /metrics stackstream_build_info, the UI).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X github.com/stackstream/stackstream/pkg/version.Version=$(VERSION) -X github.com/stackstream/stackstream/pkg/version.Commit=$(COMMIT)
# Every module of the workspace (go test ./... at a go.work root without a
# root module matches nothing, so iterate them).
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null | sed "s|^$(CURDIR)/||")
PKGS := $(addsuffix /...,$(addprefix ./,$(MODULES)))
BINARIES := \
	services/agent/cmd/stackstream-agent \
	services/symbolizer/cmd/stackstream-symbolizer \
	services/indexer/cmd/stackstream-indexer \
	services/rollup/cmd/stackstream-rollup \
	services/ingest/cmd/stackstream-ingest \
	services/query/cmd/stackstream-query \
	services/ctl/cmd/stackctl
# Binaries whose main package exists so far.
BUILDABLE := $(foreach b,$(BINARIES),$(if $(wildcard $(b)/main.go),$(b)))

.PHONY: up down status run build test e2e bench release generate check-generated lint fuzz clean

up: ## start local Kafka + OpenSearch on 127.0.0.1 (downloads once)
	deploy/local/up.sh

down: ## stop them
	deploy/local/down.sh

status: ## show whether they run
	deploy/local/status.sh

.PHONY: up-secure down-secure
up-secure: ## start the secured Kafka (SASL_SSL SCRAM-SHA-512, mTLS) and OpenSearch (security plugin) beside them
	deploy/local/secure-up.sh

down-secure: ## stop them
	deploy/local/secure-down.sh

build: ## binaries into bin/
	@mkdir -p $(BIN)
	@for b in $(BUILDABLE); do echo "build $$(basename $$b)"; go build -ldflags '$(LDFLAGS)' -o $(BIN)/$$(basename $$b) ./$$b; done

run: build up ## the whole pipeline on this host
	deploy/local/run.sh

# Packages run one at a time: integration tests share one broker and one node,
# and some of them cut connections or stop services on purpose.
test: ## every module's tests (integration tests need make up; CI=true makes missing services fail)
	go test -p 1 -count=1 -timeout 60m $(PKGS)

e2e: build ## end-to-end suite against the running local stack
	go test -count=1 -v ./e2e/...

.PHONY: kube-apiserver
kube-apiserver: ## kube-apiserver and etcd from their Go modules for deploy/kubernetes's apply test (minutes once, then cached)
	deploy/internal/kubeapiserver/build.sh

.PHONY: e2e-compose
e2e-compose: ## docker-compose.yml in containers (local images, host network): build, up, TestCompose, down (needs dockerd, docker-compose, mmdebstrap)
	deploy/docker/e2e-compose.sh

bench: build ## benchmarks: go test -bench plus the harnesses that print tables
	go test -run '^$$' -bench . -benchmem -count=1 $(PKGS)
	@for h in services/*/bench/run.sh; do [ -x "$$h" ] && { echo "== $$h"; SOAK=$${SOAK:-30m} "$$h"; } || true; done

release: ## versioned static binaries (amd64, arm64), SBOMs, OCI image archives and SHA256SUMS into dist/
	go run ./deploy/release -version $(VERSION) -out dist

generate: ## rebuild bpf2go output (needs clang, llvm, libbpf-dev)
	cd bpf && go generate ./...

check-generated: generate ## fail if the committed bpf2go output differs from what its sources give
	@git diff --quiet -- bpf || { git diff --stat -- bpf; echo "check-generated: bpf2go output is stale: run make generate and commit it"; exit 1; }

lint:
	go vet $(PKGS)
	@test -z "$$(gofmt -l $(MODULES))" || { gofmt -l $(MODULES); exit 1; }

fuzz: ## a short run of every fuzz target
	@for m in $(MODULES); do (cd $$m && for p in $$(go list ./...); do \
		for f in $$(go test -list '^Fuzz' $$p | grep '^Fuzz' || true); do \
			echo "fuzz $$p $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s $$p; done; done); done

clean:
	rm -rf $(BIN)
