#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that deploy/kubernetes's apply test
# (TestApplyToAPIServer) runs, from their Go modules (this directory's go.mod pins
# k8s.io/kubernetes and its staging modules of one release), into bin/ here.
# A second run with the same sources and Go does nothing: bin/.stamp records them.
# Cold (empty Go build cache) it takes minutes: .ci/run starts it in the background
# early (`make kube-apiserver`) and waits for it before `make test`.
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

stamp=$( (go version; cat go.mod go.sum etcd/main.go build.sh) | sha256sum | cut -d' ' -f1)
if [[ -x bin/kube-apiserver && -x bin/etcd && $(cat bin/.stamp 2>/dev/null) == "$stamp" ]]; then
  echo "kube-apiserver, etcd: up to date in $PWD/bin"
  exit 0
fi
mkdir -p bin
rm -f bin/.stamp
t0=$SECONDS
echo "kube-apiserver, etcd: downloading modules"
go mod download
echo "kube-apiserver, etcd: modules ready [$((SECONDS - t0))s]; building etcd"
go build -trimpath -o bin/etcd ./etcd
echo "kube-apiserver, etcd: etcd built [$((SECONDS - t0))s]; building kube-apiserver (minutes on a cold build cache)"
go build -trimpath -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
echo "$stamp" > bin/.stamp
echo "kube-apiserver, etcd: built in $((SECONDS - t0))s into $PWD/bin"
