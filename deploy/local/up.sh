#!/usr/bin/env bash
# Start the local Kafka and OpenSearch (no Docker) and wait until both answer.
# Idempotent: a service that is already running is left alone.
#
#   deploy/local/up.sh        (make up)
#
# Environment: STACKSTREAM_CACHE (downloads, default ~/.cache/stackstream),
# STACKSTREAM_STATE (data/logs/pids, default <repo>/.run), STACKSTREAM_UP_TIMEOUT (180),
# STACKSTREAM_KAFKA_PORT (9092), STACKSTREAM_KAFKA_CONTROLLER_PORT (9093),
# STACKSTREAM_OPENSEARCH_PORT (9200), STACKSTREAM_OPENSEARCH_TRANSPORT_PORT (9300).
set -euo pipefail
export SCRIPT_NAME=up
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SERVICES=(kafka opensearch)
declare -A ADDR=([kafka]="127.0.0.1:$KAFKA_PORT" [opensearch]="http://127.0.0.1:$OPENSEARCH_PORT")

svc() { "$LOCAL_DIR/$1.sh" "${@:2}"; }

# Check every port first, so that a conflict stops us before anything is started.
for s in "${SERVICES[@]}"; do svc "$s" preflight; done
for s in "${SERVICES[@]}"; do svc "$s" fetch; done

# Start both, then wait for both: they boot in parallel.
declare -A pending=()
for s in "${SERVICES[@]}"; do
  if svc "$s" running >/dev/null && svc "$s" ready; then
    say "$s already running (pid $(svc "$s" running)) on ${ADDR[$s]}"
  else
    svc "$s" start
    pending[$s]=1
  fi
done

# Which service failed, where its log is, and the end of that log.
report() {
  local s=$1 why=$2 log
  log=$(svc "$s" log)
  echo "up: $s $why; log: $log" >&2
  show_log_tail "$s" "$log"
}

start=$SECONDS
while ((${#pending[@]} > 0)); do
  for s in "${!pending[@]}"; do
    if svc "$s" ready; then
      # Kafka's "ready" only reads its log; one real request proves it answers.
      if [[ $s == kafka ]] && ! svc kafka probe; then continue; fi
      say "$s ready on ${ADDR[$s]} in $((SECONDS - start))s"
      unset "pending[$s]"
    elif ! svc "$s" running >/dev/null; then
      report "$s" "exited during start-up"
      exit 1
    fi
  done
  ((${#pending[@]} == 0)) && break
  if ((SECONDS - start >= UP_TIMEOUT)); then
    for s in "${!pending[@]}"; do
      report "$s" "did not answer within ${UP_TIMEOUT}s (slow machine? raise STACKSTREAM_UP_TIMEOUT)"
    done
    exit 1
  fi
  sleep 1
done
