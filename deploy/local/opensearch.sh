#!/usr/bin/env bash
# Local single-node OpenSearch, no Docker, no security plugin, run as an unprivileged user.
#
#   opensearch.sh fetch    download and assemble the distribution once into the cache
#   opensearch.sh start    start in the background
#   opensearch.sh ready    exit 0 if the cluster is at least yellow
#   opensearch.sh stop     SIGTERM, then SIGKILL after 30 s
#   opensearch.sh status   one line: running/stopped, pid, port, cluster health
#
# up.sh, down.sh and status.sh call these; they are handy alone too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SCRIPT_NAME=${SCRIPT_NAME:-opensearch}

OS_CACHE_HOME=$CACHE_DIR/opensearch-$OPENSEARCH_VERSION
OS_STATE=$STATE_DIR/opensearch
OS_PID=$OS_STATE/opensearch.pid
OS_LOG=$OS_STATE/opensearch.log
OS_URL=http://127.0.0.1:$OPENSEARCH_PORT
# What /proc/PID/cmdline must contain for a pid to be our node: the JVM, or the
# launcher script during the first seconds (before it execs the JVM).
OS_MATCH='org.opensearch.bootstrap.OpenSearch|bin/opensearch'

# Modules of the full distribution that the integ-test-zip lacks, added from their
# Maven artifacts: name|groupId:artifactId|plugin class|extended plugins.
#   lang-painless: scripts in queries, aggregations and updates
#   analysis-common: most analyzers, tokenizers and filters (lowercase, ngram, ...)
#   mapper-extras: scaled_float, search_as_you_type, rank_feature, token_count
#   reindex: _reindex, _update_by_query, _delete_by_query
OS_MODULES=(
  "lang-painless|org.opensearch.plugin:lang-painless|org.opensearch.painless.PainlessPlugin|"
  "analysis-common|org.opensearch.plugin:analysis-common|org.opensearch.analysis.common.CommonAnalysisPlugin|lang-painless"
  "mapper-extras|org.opensearch.plugin:mapper-extras-client|org.opensearch.index.mapper.MapperExtrasPlugin|"
  "reindex|org.opensearch.plugin:reindex-client|org.opensearch.index.reindex.ReindexPlugin|"
)

# copy_closure GROUP ARTIFACT DIR: the artifact and its runtime dependencies as jars.
copy_closure() {
  (cd "$3" && mvn_quiet -f "$LOCAL_DIR/pom-opensearch-module.xml" \
    -Dopensearch.version="$OPENSEARCH_VERSION" -Dmodule.groupId="$1" -Dmodule.artifactId="$2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$3")
}

os_fetch() {
  [[ -f $OS_CACHE_HOME/.complete ]] && return 0
  say "downloading opensearch $OPENSEARCH_VERSION (once) into $OS_CACHE_HOME ..."
  local tmp=$OS_CACHE_HOME.tmp.$$ entry name ga cls ext jar
  rm -rf "$tmp"
  mkdir -p "$tmp/zip" "$tmp/core"
  # The integ-test-zip: the plain server, no security plugin, no bundled JDK.
  (cd "$tmp" && mvn_quiet dependency:copy \
    -Dartifact="org.opensearch.distribution.integ-test-zip:opensearch:$OPENSEARCH_VERSION:zip" \
    -DoutputDirectory="$tmp/zip") ||
    { rm -rf "$tmp"; die "could not download the opensearch distribution (see the Maven output above)"; }
  unzip -q "$tmp/zip/opensearch-$OPENSEARCH_VERSION.zip" -d "$tmp"
  mv "$tmp/opensearch-$OPENSEARCH_VERSION" "$tmp/home"

  # A module directory must not repeat a jar of the server's own class path
  # (OpenSearch's jar-hell check refuses to start), so drop what the server brings.
  copy_closure org.opensearch opensearch "$tmp/core" ||
    { rm -rf "$tmp"; die "could not resolve org.opensearch:opensearch:$OPENSEARCH_VERSION"; }
  for entry in "${OS_MODULES[@]}"; do
    IFS='|' read -r name ga cls ext <<<"$entry"
    mkdir -p "$tmp/m-$name" "$tmp/home/modules/$name"
    copy_closure "${ga%%:*}" "${ga#*:}" "$tmp/m-$name" ||
      { rm -rf "$tmp"; die "could not download the opensearch module $ga"; }
    for jar in "$tmp/m-$name"/*.jar; do
      jar=$(basename "$jar")
      [[ -e $tmp/core/$jar || -e $tmp/home/lib/$jar ]] && continue
      # analysis-common extends lang-painless, whose jars it must not repeat either.
      [[ -n $ext && -e $tmp/home/modules/$ext/$jar ]] && continue
      cp "$tmp/m-$name/$jar" "$tmp/home/modules/$name/"
    done
    # The zip's own modules carry this descriptor; the Maven jars do not.
    cat >"$tmp/home/modules/$name/plugin-descriptor.properties" <<EOF
description=$name module (assembled by deploy/local/opensearch.sh)
version=$OPENSEARCH_VERSION
name=$name
classname=$cls
java.version=11
opensearch.version=$OPENSEARCH_VERSION
custom.foldername=
extended.plugins=$ext
has.native.controller=false
EOF
  done
  # The same permissions as in the full distribution's modules.
  cat >"$tmp/home/modules/lang-painless/plugin-security.policy" <<'EOF'
grant {
  // needed to generate runtime classes
  permission java.lang.RuntimePermission "createClassLoader";
  // needed to find the classloader to load allowlisted classes from
  permission java.lang.RuntimePermission "getClassLoader";
};
EOF
  cat >"$tmp/home/modules/reindex/plugin-security.policy" <<'EOF'
grant {
  // reindex from a remote cluster opens socket connections using the rest client
  permission java.net.SocketPermission "*", "connect";
};
EOF
  rm -rf "$tmp/zip" "$tmp/core" "$tmp"/m-*
  touch "$tmp/home/.complete"
  rm -rf "$OS_CACHE_HOME"
  mv "$tmp/home" "$OS_CACHE_HOME"
  rmdir "$tmp"
}

# OpenSearch refuses to run as root: a system user without a login or home runs it.
ensure_user() {
  id -u "$OPENSEARCH_USER" >/dev/null 2>&1 && return 0
  [[ $(id -u) == 0 ]] || die "user $OPENSEARCH_USER is missing and only root can create it"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$OPENSEARCH_USER"
  say "created system user $OPENSEARCH_USER (runs OpenSearch, which refuses root)"
}

# as_user: the command prefix that drops root for OpenSearch. setpriv execs (runuser
# would stay as a parent process), so the pid recorded at start is the JVM's.
as_user=()
if [[ $(id -u) == 0 ]]; then
  as_user=(setpriv --reuid="$OPENSEARCH_USER" --regid="$OPENSEARCH_USER" --init-groups --)
fi

# Where the node's home, config, data and logs live: the state dir, unless the
# unprivileged user cannot reach it (a work tree under /root, which is mode 700);
# then a directory of its own under /var/lib, named after the state dir.
os_rundir() {
  mkdir -p "$OS_STATE"
  if "${as_user[@]}" test -x "$OS_STATE"; then
    echo "$OS_STATE/node"
  else
    echo "/var/lib/stackstream/opensearch-$(echo "$OS_STATE" | cksum | cut -d' ' -f1)"
  fi
}

write_config() {
  local run=$1
  mkdir -p "$run/config" "$run/data" "$run/logs"
  # A hard-linked copy of the cached home (a plain copy across file systems): the
  # cache may sit under /root, which the unprivileged user cannot enter.
  if [[ ! -f $run/home/.complete ]] || ! cmp -s "$run/home/lib/opensearch-$OPENSEARCH_VERSION.jar" \
    "$OS_CACHE_HOME/lib/opensearch-$OPENSEARCH_VERSION.jar"; then
    rm -rf "${run:?}/home"
    cp -al "$OS_CACHE_HOME" "$run/home" 2>/dev/null || cp -a "$OS_CACHE_HOME" "$run/home"
  fi
  cp "$OS_CACHE_HOME/config/log4j2.properties" "$run/config/"
  # The shipped jvm.options with a smaller heap, and paths that pointed into the
  # home (relative to the working directory) moved to the node's own directories.
  sed -e 's/^-Xms.*/-Xms512m/' -e 's/^-Xmx.*/-Xmx1g/' \
    -e "s#HeapDumpPath=data#HeapDumpPath=$run/data#" \
    -e "s#file=logs/gc.log#file=$run/logs/gc.log#" -e "s#filecount=32,filesize=64m#filecount=4,filesize=16m#" \
    -e "s#ErrorFile=logs/#ErrorFile=$run/logs/#" \
    "$OS_CACHE_HOME/config/jvm.options" >"$run/config/jvm.options"
  cat >"$run/config/opensearch.yml" <<EOF
# Generated by deploy/local/opensearch.sh on every start: edit that script, not this file.
cluster.name: stackstream-local
node.name: local
# Loopback only: this also keeps the production bootstrap checks off (dev mode).
network.host: 127.0.0.1
http.port: $OPENSEARCH_PORT
transport.port: $OPENSEARCH_TRANSPORT_PORT
discovery.type: single-node
path.data: $run/data
path.logs: $run/logs
# A developer's disk is often fuller than the 85/90/95 % watermarks; writes must not
# turn read-only because of it.
cluster.routing.allocation.disk.threshold_enabled: false
EOF
  # Data, logs and the keystore that OpenSearch creates in its config dir belong to
  # the user that runs it (without root, that is simply the caller).
  if [[ $(id -u) == 0 ]]; then
    chown -R "$OPENSEARCH_USER:" "$run/config" "$run/data" "$run/logs"
  fi
}

# Before starting: our node already running is fine, any other listener on its
# ports is not (it would be the one that clients reach).
os_preflight() {
  pid_alive "$OS_PID" "$OS_MATCH" >/dev/null && return 0
  check_port_free "$OPENSEARCH_PORT" STACKSTREAM_OPENSEARCH_PORT
  check_port_free "$OPENSEARCH_TRANSPORT_PORT" STACKSTREAM_OPENSEARCH_TRANSPORT_PORT
}

os_start() {
  local pid run
  if pid=$(pid_alive "$OS_PID" "$OS_MATCH"); then
    say "opensearch already running (pid $pid) on $OS_URL"
    return 0
  fi
  os_preflight
  os_fetch
  if [[ $(id -u) == 0 ]]; then ensure_user; fi
  run=$(os_rundir)
  [[ $run == "$OS_STATE/node" ]] || say "note: $OS_STATE is not reachable by user $OPENSEARCH_USER; node files in $run"
  write_config "$run"
  echo "$run" >"$OS_STATE/node-dir"
  launch_opensearch "$run" "$OS_LOG" "$OS_PID"
  say "opensearch starting (pid $(cat "$OS_PID")), log: $OS_LOG"
}

os_health() {
  curl -fsS --max-time 5 "$OS_URL/_cluster/health" 2>/dev/null |
    grep -o '"status":"[a-z]*"' | cut -d'"' -f4
}

os_ready() {
  curl -fsS --max-time 5 -o /dev/null \
    "$OS_URL/_cluster/health?wait_for_status=yellow&timeout=2s" 2>/dev/null
}

os_status() {
  local pid health
  if pid=$(pid_alive "$OS_PID" "$OS_MATCH"); then
    health=$(os_health || true)
    if [[ -n $health ]]; then
      echo "opensearch  running  pid $pid  $OS_URL  cluster health: $health  (log $OS_LOG)"
    else
      echo "opensearch  starting pid $pid  $OS_URL not answering yet  (log $OS_LOG)"
    fi
  else
    echo "opensearch  stopped  port $OPENSEARCH_PORT$(port_open "$OPENSEARCH_PORT" && echo " (in use by $(port_owner "$OPENSEARCH_PORT"))")"
  fi
}

case ${1:-} in
  fetch) os_fetch ;;
  preflight) os_preflight ;;
  start) os_start ;;
  running) pid_alive "$OS_PID" "$OS_MATCH" ;;
  ready) os_ready ;;
  stop) stop_pid opensearch "$OS_PID" "$OS_MATCH" ;;
  status) os_status ;;
  log) echo "$OS_LOG" ;;
  *) echo "usage: $0 fetch|preflight|start|running|ready|stop|status|log" >&2; exit 2 ;;
esac
