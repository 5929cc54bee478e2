# shellcheck shell=bash disable=SC2034  # sourced; the variables are used by the scripts
# Shared settings and helpers for the local (no Docker) Kafka and OpenSearch.
# Sourced by kafka.sh, opensearch.sh, secure.sh, up.sh, down.sh and status.sh; not
# run directly.
#
# Versions are pinned here and in docker-compose.yml: keep the two in step.

# Kafka 4.x: its broker needs Java 17+, this one runs on the default JDK 17.
KAFKA_VERSION=4.4.0
# log4j2 backend for slf4j, so the broker's and the tools' log lines are printed.
KAFKA_LOG4J_VERSION=2.25.5
# OpenSearch 2.19.x is the newest line that still runs on Java 17 (3.x needs 21).
OPENSEARCH_VERSION=2.19.6

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LOCAL_DIR/../.." && pwd)

# Downloads are cached outside the work tree so that a fresh clone (and CI on a
# machine that was used before) does not download them again.
CACHE_DIR=${STACKSTREAM_CACHE:-$HOME/.cache/stackstream}
# Data, logs and pid files: per work tree, removed with `rm -rf .run`.
STATE_DIR=${STACKSTREAM_STATE:-$REPO_ROOT/.run}

KAFKA_PORT=${STACKSTREAM_KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${STACKSTREAM_KAFKA_CONTROLLER_PORT:-9093}
OPENSEARCH_PORT=${STACKSTREAM_OPENSEARCH_PORT:-9200}
OPENSEARCH_TRANSPORT_PORT=${STACKSTREAM_OPENSEARCH_TRANSPORT_PORT:-9300}

# Seconds to wait for each service to answer after starting it.
UP_TIMEOUT=${STACKSTREAM_UP_TIMEOUT:-180}

# JDK 17 for both (Debian's default); override with STACKSTREAM_JAVA_HOME.
JAVA_HOME_17=${STACKSTREAM_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
if [[ ! -x $JAVA_HOME_17/bin/java ]]; then
  JAVA_HOME_17=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
fi
JAVA=$JAVA_HOME_17/bin/java

# OpenSearch refuses to run as root, so it runs as this system user.
OPENSEARCH_USER=stackstream

# Prefix every line with the calling command (up:, down:, status:).
say() { echo "${SCRIPT_NAME:-local}: $*"; }
die() { echo "${SCRIPT_NAME:-local}: $*" >&2; exit 1; }

# Maven picks the repository from its own settings; no repository is named here.
mvn_quiet() {
  local out
  if ! out=$(mvn -q -B -Dstyle.color=never "$@" 2>&1); then
    echo "$out" | tail -n 30 >&2
    return 1
  fi
}

# pid_alive PIDFILE REGEX: prints the pid if the file names a live process whose
# command line matches REGEX (so that a recycled pid is not taken for ours).
pid_alive() {
  local pidfile=$1 pattern=$2 pid
  [[ -s $pidfile ]] || return 1
  pid=$(<"$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && [[ -r /proc/$pid/cmdline ]] || return 1
  grep -qE -- "$pattern" <<<"$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  echo "$pid"
}

# port_open PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# port_owner PORT: "pid N (command)" of the listener, or "another process"
# when ss is missing or cannot tell.
port_owner() {
  local pid
  if command -v ss >/dev/null; then
    pid=$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2)
  fi
  if [[ -n ${pid:-} ]]; then
    echo "pid $pid ($(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-80 | sed 's/ *$//'))"
  else
    echo "another process"
  fi
}

# check_port_free PORT ENVVAR: fail with a useful line if the port is taken.
check_port_free() {
  if port_open "$1"; then
    die "port $1 is already in use (by $(port_owner "$1")): stop it or set $2 to another port"
  fi
}

# stop_pid NAME PIDFILE PATTERN: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
  local name=$1 pidfile=$2 pattern=$3 pid i
  if ! pid=$(pid_alive "$pidfile" "$pattern"); then
    say "$name is not running"
    rm -f "$pidfile"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) did not stop in 30s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$pidfile"
  say "$name stopped (pid $pid)"
}

# show_log_tail NAME LOG: what a developer needs to see when a start fails.
show_log_tail() {
  echo "---- last 20 lines of $2 ----" >&2
  tail -n 20 "$2" >&2 2>/dev/null || echo "(no log)" >&2
  echo "----" >&2
}

# kafka_node_properties: the server.properties lines every local node shares (the
# plain one in kafka.sh, the secured one in secure.sh), after its listeners.
kafka_node_properties() {
  cat <<'EOF'
# One node: every internal topic has a single replica, or it is never created
# (consumer groups, transactions and share groups would hang).
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1

# Tests: no 3 s wait before the first rebalance; topics only via stackctl init
# (so a typo in a topic name fails instead of creating a new topic).
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.partitions=3

# stackstream.debuginfo records carry a binary's symbols: allow up to 16 MiB.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216

# Small disk footprint for a developer machine. Records are deleted by their
# timestamp: a test producing records dated more than a day ago loses them.
log.retention.hours=24
log.segment.bytes=104857600
EOF
}

# kafka_log4j2 DIR: Kafka 4 logs with log4j2; everything to stdout, which the
# start function sends to the node's log.
kafka_log4j2() {
  cat >"$1/log4j2.properties" <<'EOF'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
# Per-request and per-partition state lines would drown the useful ones.
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
EOF
}

# launch_opensearch RUN LOG PIDFILE: start the node whose home and config are in
# RUN, in the background, as $OPENSEARCH_USER when root (as_user), logging to LOG.
# bin/opensearch runs its own helpers from relative paths: it starts in the home.
# The log is opened here, by the calling user, so it stays in the state dir.
# setsid + nohup: own session, outlives the calling shell; setsid, nohup, setpriv and
# the script's final exec all keep one process, so the pid is the JVM itself.
launch_opensearch() {
  local run=$1 log=$2 pidfile=$3
  [[ -f $log ]] && mv -f "$log" "$log.1"
  (
    cd "$run/home"
    env -u JAVA_TOOL_OPTIONS -u JAVA_OPTS HOME="$run" OPENSEARCH_JAVA_HOME="$JAVA_HOME_17" \
      OPENSEARCH_PATH_CONF="$run/config" OPENSEARCH_JAVA_OPTS="" \
      setsid nohup "${as_user[@]}" bin/opensearch >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  )
}
