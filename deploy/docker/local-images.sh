#!/usr/bin/env bash
# Build the images of deploy/docker/compose.local.yml on this machine, without any
# image registry:
#   stackstream-local/<binary>:TAG     FROM scratch: one static Go binary (CGO off), the
#                                      host's CA bundle, an empty /tmp
#   stackstream-local/base:bookworm-H  Debian bookworm from Debian packages (mmdebstrap):
#                                      a JRE, kcat and curl (health checks), user 1000;
#                                      H hashes its recipe, so it is built once per machine
#   stackstream-local/kafka:TAG        base + the Kafka jars deploy/local/kafka.sh fetches
#   stackstream-local/opensearch:TAG   base + the distribution deploy/local/opensearch.sh
#                                      assembles (both from the shared download cache)
#
#   deploy/docker/local-images.sh      (make e2e-compose runs it)
#
# Environment: STACKSTREAM_COMPOSE_TAG (e2e), STACKSTREAM_CACHE and STACKSTREAM_STATE as
# in deploy/local (downloads; the staging directory is $STATE/compose).
# Needs: docker (a running engine), mmdebstrap (for the base, only when it is missing).
set -euo pipefail
export SCRIPT_NAME=images
source "$(dirname "${BASH_SOURCE[0]}")/../local/common.sh"

TAG=${STACKSTREAM_COMPOSE_TAG:-e2e}
DOCKER_DIR=$REPO_ROOT/deploy/docker
STAGE=$STATE_DIR/compose
# The legacy builder: it uses local images for FROM without asking a registry.
export DOCKER_BUILDKIT=0

BINARIES=(stackstream-agent stackstream-symbolizer stackstream-indexer stackstream-rollup stackstream-query stackctl)
BASE_PACKAGES=openjdk-17-jre-headless,kcat,curl
# Run as root by the base's hook: the unprivileged user the Kafka and OpenSearch images
# run as, and its state directory.
BASE_HOOK='echo "stackstream:x:1000:1000::/var/lib/stackstream:/usr/sbin/nologin" >>"$1/etc/passwd"; echo "stackstream:x:1000:" >>"$1/etc/group"; mkdir -p "$1/var/lib/stackstream"; chown 1000:1000 "$1/var/lib/stackstream"'
BASE=stackstream-local/base:bookworm-$(printf '%s\n' "$BASE_PACKAGES" "$BASE_HOOK" | sha256sum | cut -c1-12)

T0=$SECONDS
took() { echo "$((SECONDS - $1))s"; }

# The host's apt sources for bookworm, so the base comes from the mirror apt uses here.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && grep -qw bookworm "$f" && echo "$f"
  done
  return 0
}

build_base() {
  local log=$STAGE/mmdebstrap.log t=$SECONDS sources
  mapfile -t sources < <(apt_sources)
  ((${#sources[@]})) || die "no apt sources for bookworm in /etc/apt: cannot build $BASE"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
  # Documentation and translations are not needed in a test image; unsafe-io: no
  # fsync per file (a failed build is simply redone).
  if ! mmdebstrap --variant=essential --include="$BASE_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' \
    --customize-hook="$BASE_HOOK" --format=tar bookworm "$STAGE/base.tar" "${sources[@]}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "mmdebstrap failed (log: $log)"
  fi
  docker import "$STAGE/base.tar" "$BASE" >/dev/null
  rm -f "$STAGE/base.tar"
  say "base $BASE built in $(took "$t")"
}

# The service images: a root file system of three entries, imported as a layer.
build_binaries() {
  local t=$SECONDS b pkg root
  for b in "${BINARIES[@]}"; do
    case $b in
      stackctl) pkg=./services/ctl/cmd/stackctl ;;
      *) pkg=./services/${b#stackstream-}/cmd/$b ;;
    esac
    root=$STAGE/rootfs/$b
    rm -rf "$root"
    mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
    chmod 1777 "$root/tmp"
    (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$root/usr/local/bin/$b" "$pkg")
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
    tar -C "$root" --owner=0 --group=0 -c . |
      docker import --change "ENTRYPOINT [\"/usr/local/bin/$b\"]" --change 'USER 65532:65532' \
        - "stackstream-local/$b:$TAG" >/dev/null
    say "  stackstream-local/$b:$TAG ($(du -h "$root/usr/local/bin/$b" | cut -f1) static binary)"
  done
  say "service images built in $(took "$t")"
}

# docker build CONTEXT DOCKERFILE IMAGE, with the output in the stage's log.
docker_build() {
  local log=$STAGE/build-$(basename "$3" | tr ':/' '--').log
  if ! docker build --network host --build-arg BASE="$BASE" -f "$2" -t "$3" "$1" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "docker build of $3 failed (log: $log)"
  fi
}

build_kafka() {
  local t=$SECONDS ctx=$STAGE/kafka
  "$LOCAL_DIR/kafka.sh" fetch
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp -al "$CACHE_DIR/kafka-$KAFKA_VERSION/libs" "$ctx/libs" 2>/dev/null || cp -a "$CACHE_DIR/kafka-$KAFKA_VERSION/libs" "$ctx/libs"
  rm -f "$ctx/libs/.complete" "$ctx/libs/tools-log4j2.properties"
  kafka_log4j2 "$ctx"
  cp "$DOCKER_DIR/local/kafka-entrypoint.sh" "$ctx/"
  docker_build "$ctx" "$DOCKER_DIR/local/kafka.Dockerfile" "stackstream-local/kafka:$TAG"
  say "stackstream-local/kafka:$TAG (kafka $KAFKA_VERSION) built in $(took "$t")"
}

build_opensearch() {
  local t=$SECONDS ctx=$STAGE/opensearch
  "$LOCAL_DIR/opensearch.sh" fetch
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp -al "$CACHE_DIR/opensearch-$OPENSEARCH_VERSION" "$ctx/opensearch" 2>/dev/null || cp -a "$CACHE_DIR/opensearch-$OPENSEARCH_VERSION" "$ctx/opensearch"
  rm -f "$ctx/opensearch/.complete"
  mkdir -p "$ctx/opensearch/data" "$ctx/opensearch/logs"
  cp "$DOCKER_DIR/local/opensearch-entrypoint.sh" "$DOCKER_DIR/local/opensearch.yml" "$ctx/"
  docker_build "$ctx" "$DOCKER_DIR/local/opensearch.Dockerfile" "stackstream-local/opensearch:$TAG"
  say "stackstream-local/opensearch:$TAG (opensearch $OPENSEARCH_VERSION) built in $(took "$t")"
}

docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd first)"
mkdir -p "$STAGE"

# The base (mostly waiting on downloads and dpkg) builds while the Go binaries compile.
base_pid=
if docker image inspect "$BASE" >/dev/null 2>&1; then
  say "base $BASE present"
else
  say "building base $BASE with mmdebstrap (in the background, log: $STAGE/mmdebstrap.log) ..."
  build_base &
  base_pid=$!
fi
say "building the service images (static binaries) ..."
build_binaries
if [[ -n $base_pid ]]; then
  wait "$base_pid" || die "the base image failed"
fi
build_kafka
build_opensearch
say "all images built in $(took "$T0")"
