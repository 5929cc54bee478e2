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
#   deploy/docker/local-images.sh            all of them (make e2e-compose runs it)
#   deploy/docker/local-images.sh base-tar   only the base's root file system, as a
#                                            tarball in the stage (no Docker needed);
#                                            the next full run imports it
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

# base_tar: the base's root file system as a tarball in the stage (named after its
# recipe hash), made by mmdebstrap unless an earlier `local-images.sh base-tar` left it.
BASE_TAR=$STAGE/base-${BASE##*:}.tar
base_tar() {
  local log=$STAGE/mmdebstrap.log t=$SECONDS sources
  [[ -f $BASE_TAR ]] && return 0
  mapfile -t sources < <(apt_sources)
  ((${#sources[@]})) || die "no apt sources for bookworm in /etc/apt: cannot build $BASE"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
  mkdir -p "$STAGE"
  # Documentation and translations are not needed in a test image; unsafe-io: no
  # fsync per file (a failed build is simply redone).
  if ! mmdebstrap --variant=essential --include="$BASE_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' \
    --customize-hook="$BASE_HOOK" --format=tar bookworm "$BASE_TAR.tmp" "${sources[@]}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$BASE_TAR.tmp"
    die "mmdebstrap failed (log: $log)"
  fi
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  say "base root file system $BASE_TAR made in $(took "$t")"
}

build_base() {
  local t=$SECONDS
  base_tar
  docker import "$BASE_TAR" "$BASE" >/dev/null
  rm -f "$BASE_TAR"
  say "base $BASE built in $(took "$t")"
}

# The service images: a root file system of three entries, imported as a layer.
build_binaries() {
  local t=$SECONDS b pkg root old
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
    old=$(image_id "stackstream-local/$b:$TAG")
    tar -C "$root" --owner=0 --group=0 -c . |
      docker import --change "ENTRYPOINT [\"/usr/local/bin/$b\"]" --change 'USER 65532:65532' \
        - "stackstream-local/$b:$TAG" >/dev/null
    drop_replaced "$old" "stackstream-local/$b:$TAG"
    say "  stackstream-local/$b:$TAG ($(du -h "$root/usr/local/bin/$b" | cut -f1) static binary)"
  done
  say "service images built in $(took "$t")"
}

image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

# drop_replaced OLD_ID IMAGE: a rebuild leaves the previous image untagged; remove it
# (only that one) unless IMAGE still is it or a container uses it.
drop_replaced() {
  [[ -n $1 && $1 != "$(image_id "$2")" ]] && docker rmi "$1" >/dev/null 2>&1 || true
}

# docker build CONTEXT DOCKERFILE IMAGE, with the output in the stage's log.
docker_build() {
  local log=$STAGE/build-$(basename "$3" | tr ':/' '--').log old
  old=$(image_id "$3")
  if ! docker build --network host --build-arg BASE="$BASE" -f "$2" -t "$3" "$1" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "docker build of $3 failed (log: $log)"
  fi
  drop_replaced "$old" "$3"
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

case ${1:-all} in
  all) ;;
  # Only the base's tarball, without Docker: CI makes it while the other tests run.
  base-tar) base_tar; exit 0 ;;
  *) echo "usage: $0 [all|base-tar]" >&2; exit 2 ;;
esac
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
