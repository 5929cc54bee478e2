#!/usr/bin/env bash
# Run the stackstream binaries from bin/ against the local Kafka and OpenSearch.
#
#   deploy/local/services.sh start|stop|status
#
# Each service logs to .run/services/<name>.log; its pid is in <name>.pid.
# Only binaries that exist in bin/ are started, so the pipeline grows as
# services land. The agent needs root (CAP_BPF + CAP_PERFMON).
set -euo pipefail
export SCRIPT_NAME=services
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SVC_DIR=$STATE_DIR/services
BIN_DIR=$REPO_ROOT/bin
# Consumers first, producers (ingest, agent) last: by the time anything is published, every consumer
# group exists, and stopping goes the other way round so nothing is left unread.
SERVICES=(stackstream-symbolizer stackstream-indexer stackstream-rollup stackstream-query stackstream-ingest stackstream-agent)

start_one() {
  local name=$1 pid
  [[ -x $BIN_DIR/$name ]] || { say "$name not built, skipped"; return 0; }
  if pid=$(pid_alive "$SVC_DIR/$name.pid" "$name"); then
    say "$name already running (pid $pid)"
    return 0
  fi
  if [[ $name == stackstream-agent && $(id -u) != 0 ]]; then
    say "$name needs root (CAP_BPF + CAP_PERFMON): run make run as root to profile this host"
    return 0
  fi
  [[ -f $SVC_DIR/$name.log ]] && mv -f "$SVC_DIR/$name.log" "$SVC_DIR/$name.log.1"
  # setsid + nohup: the service outlives the make that started it. Without job
  # control the background job is no group leader, so setsid execs in place
  # and $! is the service itself.
  setsid nohup "$BIN_DIR/$name" >"$SVC_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$SVC_DIR/$name.pid"
  sleep 1
  if pid=$(pid_alive "$SVC_DIR/$name.pid" "$name"); then
    say "$name started (pid $pid), log: $SVC_DIR/$name.log"
  else
    echo "services: $name exited at start; log: $SVC_DIR/$name.log" >&2
    show_log_tail "$name" "$SVC_DIR/$name.log"
    return 1
  fi
}

# Services read ./.env from the working directory.
cd "$REPO_ROOT"

case ${1:-} in
start)
  mkdir -p "$SVC_DIR"
  for s in "${SERVICES[@]}"; do start_one "$s"; done
  ;;
stop)
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
    s=${SERVICES[$i]}
    [[ -f $SVC_DIR/$s.pid ]] && stop_pid "$s" "$SVC_DIR/$s.pid" "$s"
  done
  true
  ;;
status)
  for s in "${SERVICES[@]}"; do
    if pid=$(pid_alive "$SVC_DIR/$s.pid" "$s"); then say "$s running (pid $pid)"; else say "$s stopped"; fi
  done
  ;;
*)
  die "usage: $0 start|stop|status"
  ;;
esac
