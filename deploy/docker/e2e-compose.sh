#!/usr/bin/env bash
# make e2e-compose: the stack of docker-compose.yml, with the local images and host
# networking of deploy/docker/compose.local.yml, started with compose, checked by
# e2e/compose_test.go (TestCompose), and torn down whatever happened.
#
#   1. images   deploy/docker/local-images.sh (no registry)
#   2. config   docker-compose.yml + compose.local.yml, merged by compose; published
#               ports are dropped (Docker's host network has none, and compose 1.29
#               refuses the two together)
#   3. up       compose up -d --no-build: Kafka and OpenSearch healthy, stackctl init
#               done, then the services; then every service's /readyz
#   4. test     go test -run '^TestCompose$' ./e2e/ against the running stack
#   5. down     compose down -v (containers, the OpenSearch volume), always
#
# Environment: the STACKSTREAM_COMPOSE_* ports of compose.local.yml (defaults below,
# away from the `make up` services), STACKSTREAM_COMPOSE_PROJECT (stackstream-e2e),
# STACKSTREAM_COMPOSE_KEEP=1 leaves the stack running after a failure for a look.
set -euo pipefail
export SCRIPT_NAME=e2e-compose
source "$(dirname "${BASH_SOURCE[0]}")/../local/common.sh"

PROJECT=${STACKSTREAM_COMPOSE_PROJECT:-stackstream-e2e}
STAGE=$STATE_DIR/compose
export STACKSTREAM_COMPOSE_KAFKA_PORT=${STACKSTREAM_COMPOSE_KAFKA_PORT:-19092}
export STACKSTREAM_COMPOSE_KAFKA_CONTROLLER_PORT=${STACKSTREAM_COMPOSE_KAFKA_CONTROLLER_PORT:-19093}
export STACKSTREAM_COMPOSE_OPENSEARCH_PORT=${STACKSTREAM_COMPOSE_OPENSEARCH_PORT:-19200}
export STACKSTREAM_COMPOSE_OPENSEARCH_TRANSPORT_PORT=${STACKSTREAM_COMPOSE_OPENSEARCH_TRANSPORT_PORT:-19300}
export STACKSTREAM_COMPOSE_QUERY_PORT=${STACKSTREAM_COMPOSE_QUERY_PORT:-18080}
export STACKSTREAM_COMPOSE_AGENT_PORT=${STACKSTREAM_COMPOSE_AGENT_PORT:-19101}
export STACKSTREAM_COMPOSE_SYMBOLIZER_PORT=${STACKSTREAM_COMPOSE_SYMBOLIZER_PORT:-19102}
export STACKSTREAM_COMPOSE_INDEXER_PORT=${STACKSTREAM_COMPOSE_INDEXER_PORT:-19103}
export STACKSTREAM_COMPOSE_ROLLUP_PORT=${STACKSTREAM_COMPOSE_ROLLUP_PORT:-19104}
export STACKSTREAM_COMPOSE_HOST_ID=${STACKSTREAM_COMPOSE_HOST_ID:-compose-e2e}
export STACKSTREAM_COMPOSE_AGENT_COMM=${STACKSTREAM_COMPOSE_AGENT_COMM:-^e2e-compose}
# Open files for OpenSearch: 65536 as in docker-compose.yml, or the hard limit this
# shell (and a dockerd started from it) has, when lower.
nofile=$(ulimit -Hn)
if [[ $nofile == unlimited ]] || ((nofile > 65536)); then nofile=65536; fi
export STACKSTREAM_COMPOSE_NOFILE=${STACKSTREAM_COMPOSE_NOFILE:-$nofile}

# Debian's docker-compose (1.29), else the compose v2 plugin.
if command -v docker-compose >/dev/null; then
  COMPOSE=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
else
  die "neither docker-compose nor the docker compose plugin is installed"
fi
compose() { "${COMPOSE[@]}" -p "$PROJECT" --project-directory "$REPO_ROOT" -f "$STAGE/compose.yml" "$@"; }

T0=$SECONDS
PHASES=()
phase_start=$SECONDS
phase() { # NAME: close the running phase under NAME
  PHASES+=("$(printf '%-8s %4ss' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}
summary() {
  echo "---- e2e-compose summary ($1) ----"
  printf '  %s\n' "${PHASES[@]}"
  echo "  total    $((SECONDS - T0))s"
}

docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd first)"
say "compose: $("${COMPOSE[@]}" version | head -n1)"
for v in KAFKA_PORT KAFKA_CONTROLLER_PORT OPENSEARCH_PORT OPENSEARCH_TRANSPORT_PORT QUERY_PORT \
  AGENT_PORT SYMBOLIZER_PORT INDEXER_PORT ROLLUP_PORT; do
  p=STACKSTREAM_COMPOSE_$v
  check_port_free "${!p}" "$p"
done

say "1/5 building the images ..."
"$REPO_ROOT/deploy/docker/local-images.sh"
phase images

say "2/5 merging docker-compose.yml and deploy/docker/compose.local.yml ..."
mkdir -p "$STAGE"
"${COMPOSE[@]}" -p "$PROJECT" --project-directory "$REPO_ROOT" -f "$REPO_ROOT/docker-compose.yml" \
  -f "$REPO_ROOT/deploy/docker/compose.local.yml" config |
  awk '/^    ports:$/ { skip = 1; next } skip && /^(    -|      )/ { next } { skip = 0; print }' >"$STAGE/compose.yml"
grep -q 'network_mode: host' "$STAGE/compose.yml" || die "the merged config lacks host networking: $STAGE/compose.yml"
phase config

rc=1
down() {
  if ((rc != 0)); then
    phase failed
    echo "---- compose ps ----"
    compose ps || true
    echo "---- last log lines of each service ----"
    compose logs --no-color --tail=25 || true
    if [[ ${STACKSTREAM_COMPOSE_KEEP:-} == 1 ]]; then
      say "STACKSTREAM_COMPOSE_KEEP=1: the stack stays up; stop it with: ${COMPOSE[*]} -p $PROJECT -f $STAGE/compose.yml down -v"
      summary "FAILED"
      exit "$rc"
    fi
  fi
  say "5/5 tearing the stack down ..."
  compose down -v --remove-orphans -t 10 >"$STAGE/down.log" 2>&1 || { cat "$STAGE/down.log"; rc=1; }
  phase down
  if ((rc == 0)); then summary "passed"; else summary "FAILED"; fi
  exit "$rc"
}
trap down EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

say "3/5 starting the stack (project $PROJECT) ..."
compose up -d --no-build
# /readyz of each long-running service, on the host's loopback; a container that
# exited is a failure at once.
ready() {
  local name=$1 port=$2 deadline=$((SECONDS + UP_TIMEOUT)) state
  until curl -fs --max-time 2 -o /dev/null "http://127.0.0.1:$port/readyz"; do
    state=$(docker inspect -f '{{.State.Status}} (exit {{.State.ExitCode}})' "$(compose ps -q "$name")" 2>/dev/null || echo missing)
    [[ $state == running* ]] || { say "$name is $state"; return 1; }
    ((SECONDS < deadline)) || { say "$name not ready on 127.0.0.1:$port after ${UP_TIMEOUT}s"; return 1; }
    sleep 1
  done
  say "  $name ready on 127.0.0.1:$port"
}
ready stackstream-symbolizer "$STACKSTREAM_COMPOSE_SYMBOLIZER_PORT"
ready stackstream-indexer "$STACKSTREAM_COMPOSE_INDEXER_PORT"
ready stackstream-rollup "$STACKSTREAM_COMPOSE_ROLLUP_PORT"
ready stackstream-query "$STACKSTREAM_COMPOSE_QUERY_PORT"
ready stackstream-agent "$STACKSTREAM_COMPOSE_AGENT_PORT"
phase up

say "4/5 running TestCompose against it ..."
(cd "$REPO_ROOT/e2e" &&
  STACKSTREAM_E2E_COMPOSE=1 \
    STACKSTREAM_E2E_QUERY_URL=http://127.0.0.1:$STACKSTREAM_COMPOSE_QUERY_PORT \
    STACKSTREAM_E2E_KAFKA_BROKERS=127.0.0.1:$STACKSTREAM_COMPOSE_KAFKA_PORT \
    STACKSTREAM_E2E_OPENSEARCH_URL=http://127.0.0.1:$STACKSTREAM_COMPOSE_OPENSEARCH_PORT \
    STACKSTREAM_E2E_INDEXER_METRICS=127.0.0.1:$STACKSTREAM_COMPOSE_INDEXER_PORT \
    STACKSTREAM_E2E_HOST_ID=$STACKSTREAM_COMPOSE_HOST_ID \
    go test -count=1 -v -timeout 10m -run '^TestCompose$' .)
rc=$?
phase test
