#!/usr/bin/env bash
# Start the secured Kafka and OpenSearch (deploy/local/secure.sh) for the security tests
# and wait until both answer with authentication (make up-secure). Idempotent: a server
# already running is left alone. They run beside the plain ones (make up), on their own
# ports, and need no Docker.
#
# Prints where the certificates and the passwords are; the tests read the state file
# $STATE_DIR/secure/secure.env (default .run/secure/secure.env).
#
# Environment: as up.sh, plus STACKSTREAM_SECURE_KAFKA_SASL_PORT (9192),
# STACKSTREAM_SECURE_KAFKA_MTLS_PORT (9193), STACKSTREAM_SECURE_KAFKA_CONTROLLER_PORT (9194),
# STACKSTREAM_SECURE_OPENSEARCH_PORT (9201), STACKSTREAM_SECURE_OPENSEARCH_TRANSPORT_PORT (9301).
set -euo pipefail
export SCRIPT_NAME=up-secure
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sec() { "$LOCAL_DIR/secure.sh" "$@"; }

sec preflight
sec fetch
sec certs
sec credentials

declare -A pending=()
declare -A NAME=([kafka]=kafka [os]=opensearch)
for s in kafka os; do
  if sec "$s-running" >/dev/null && sec "$s-ready"; then
    say "secured ${NAME[$s]} already running"
  else
    sec "$s-start"
    pending[$s]=1
  fi
done

report() {
  local s=$1 why=$2 log
  log=$(sec log "${NAME[$s]}")
  echo "up-secure: secured ${NAME[$s]} $why; log: $log" >&2
  show_log_tail "$s" "$log"
}

start=$SECONDS
while ((${#pending[@]} > 0)); do
  for s in "${!pending[@]}"; do
    if sec "$s-ready"; then
      if [[ $s == kafka ]] && ! sec kafka-probe; then continue; fi
      say "secured ${NAME[$s]} ready in $((SECONDS - start))s"
      unset "pending[$s]"
    elif ! sec "$s-running" >/dev/null; then
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

sec os-sync
env_file=$(sec env)
sec status
say "certificates: $STATE_DIR/secure/certs (ca.pem, client.pem/client-key.pem; other-ca.pem and other-client*.pem are from an untrusted CA)"
say "users and passwords: $env_file (mode 600; the tests read it)"
