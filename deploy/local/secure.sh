#!/usr/bin/env bash
# Secured local Kafka and OpenSearch for the security tests, next to the plain ones
# (deploy/local/kafka.sh, opensearch.sh), from the same cached downloads, no Docker:
#
#   Kafka, KRaft combined node:  SASL_SSL (SCRAM-SHA-512) on 127.0.0.1:9192,
#                                SSL with required client certificates (mTLS) on :9193,
#                                controller on :9194 (loopback, plaintext, broker-internal)
#   OpenSearch + security plugin: HTTPS with basic auth on https://127.0.0.1:9201,
#                                TLS transport on :9301; users admin (all_access) and
#                                indexer (role stackstream_indexer)
#
#   secure.sh certs          generate the CA, server and client certificates (once)
#   secure.sh credentials    generate the passwords (once)
#   secure.sh fetch          download the security plugin and build the node's home (once)
#   secure.sh kafka-start|kafka-ready|kafka-probe|kafka-stop|kafka-running
#   secure.sh os-start|os-ready|os-stop|os-running
#   secure.sh os-sync        after a restart, apply changed users/roles with securityadmin
#   secure.sh status         one line per server
#   secure.sh env            write and print the state file the tests read
#   secure.sh log kafka|opensearch
#
# secure-up.sh and secure-down.sh call these. Everything lives in $STATE_DIR/secure
# (.run/secure): certs/, kafka/, opensearch/, secure.env. rm -rf it after
# secure-down.sh for new certificates, passwords and empty servers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SCRIPT_NAME=${SCRIPT_NAME:-secure}

# The security plugin is released per OpenSearch version, four-part; the newest 2.19
# build on Maven is 2.19.4.0, while the local node runs 2.19.6. Patch releases keep
# the plugin API, so its descriptor is widened to the 2.19 line (~2.19.4) before it
# is installed; OpenSearch checks that range at install and at every start.
SECURITY_PLUGIN_VERSION=2.19.4.0
SECURITY_PLUGIN_RANGE="~2.19.4"

SECURE_KAFKA_SASL_PORT=${STACKSTREAM_SECURE_KAFKA_SASL_PORT:-9192}
SECURE_KAFKA_MTLS_PORT=${STACKSTREAM_SECURE_KAFKA_MTLS_PORT:-9193}
SECURE_KAFKA_CONTROLLER_PORT=${STACKSTREAM_SECURE_KAFKA_CONTROLLER_PORT:-9194}
SECURE_OS_PORT=${STACKSTREAM_SECURE_OPENSEARCH_PORT:-9201}
SECURE_OS_TRANSPORT_PORT=${STACKSTREAM_SECURE_OPENSEARCH_TRANSPORT_PORT:-9301}

SECURE=$STATE_DIR/secure
CERTS=$SECURE/certs
CREDS=$SECURE/credentials.env
ENV_FILE=$SECURE/secure.env
KAFKA_LIBS=$CACHE_DIR/kafka-$KAFKA_VERSION/libs
SK=$SECURE/kafka
SK_PID=$SK/kafka.pid
SK_LOG=$SK/kafka.log
SK_MATCH="kafka.Kafka $SK/server.properties"
SO=$SECURE/opensearch
SO_PID=$SO/opensearch.pid
SO_LOG=$SO/opensearch.log
SO_MATCH='org.opensearch.bootstrap.OpenSearch|bin/opensearch'
SO_URL=https://127.0.0.1:$SECURE_OS_PORT
OS_BASE_HOME=$CACHE_DIR/opensearch-$OPENSEARCH_VERSION
OS_SECURE_HOME=$CACHE_DIR/opensearch-$OPENSEARCH_VERSION-security-$SECURITY_PLUGIN_VERSION
# The indices the indexer role may write, create and manage.
INDEXER_PREFIX=stackstream-
# Subjects: OpenSearch names its nodes by the certificate's DN (RFC 2253 order).
DN_SUFFIX="/O=stackstream/OU=local"
NODE_DN="CN=stackstream-node,OU=local,O=stackstream"
ADMIN_DN="CN=stackstream-admin,OU=local,O=stackstream"

as_user=()
if [[ $(id -u) == 0 ]]; then
  as_user=(setpriv --reuid="$OPENSEARCH_USER" --regid="$OPENSEARCH_USER" --init-groups --)
fi

any_running() {
  pid_alive "$SK_PID" "$SK_MATCH" >/dev/null || pid_alive "$SO_PID" "$SO_MATCH" >/dev/null
}

# ---- certificates -------------------------------------------------------------------

# new_ca NAME CN: a self-signed CA, valid 30 days.
new_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -subj "$DN_SUFFIX/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$CERTS/$1-key.pem" -out "$CERTS/$1.pem" 2>/dev/null
}

# new_leaf NAME CN CA EXTENSIONS: a key (PKCS#8, unencrypted: what Kafka's PEM store and
# the OpenSearch plugin read) and a certificate signed by CA.
new_leaf() {
  local name=$1 cn=$2 ca=$3 ext=$4
  openssl req -newkey rsa:2048 -nodes -subj "$DN_SUFFIX/CN=$cn" \
    -keyout "$CERTS/$name-key.pem" -out "$CERTS/$name.csr" 2>/dev/null
  printf '%b\n' "$ext" >"$CERTS/$name.ext"
  openssl x509 -req -sha256 -days 30 -in "$CERTS/$name.csr" -CA "$CERTS/$ca.pem" \
    -CAkey "$CERTS/$ca-key.pem" -CAcreateserial -extfile "$CERTS/$name.ext" \
    -out "$CERTS/$name.pem" 2>/dev/null
  rm -f "$CERTS/$name.csr" "$CERTS/$name.ext"
}

certs() {
  # Kept across restarts; made anew when missing or when the CA expires within a day.
  if [[ -f $CERTS/.complete ]] && openssl x509 -checkend 86400 -noout -in "$CERTS/ca.pem" >/dev/null 2>&1; then
    return 0
  fi
  # Running servers hold the old ones: new files would not match them.
  if [[ -f $CERTS/.complete ]] && any_running; then
    say "warning: the certificates in $CERTS expire within a day; run make down-secure and make up-secure to renew them"
    return 0
  fi
  rm -rf "$CERTS"
  mkdir -p "$CERTS"
  chmod 700 "$CERTS"
  local server="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nsubjectAltName=IP:127.0.0.1,DNS:localhost"
  new_ca ca stackstream-local-ca
  # The server certificate serves Kafka's listeners and OpenSearch's HTTP and transport
  # layers; both also present it as a client (broker to itself, node to node).
  new_leaf node stackstream-node ca "$server\nextendedKeyUsage=serverAuth,clientAuth"
  new_leaf client stackstream-client ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
  new_leaf admin stackstream-admin ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
  # A second CA nobody trusts, and a client certificate it signed: the bad-certificate cases.
  new_ca other-ca stackstream-other-ca
  new_leaf other-client stackstream-client other-ca "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
  # Kafka's PEM key store: the key, then the certificate chain, in one file.
  cat "$CERTS/node-key.pem" "$CERTS/node.pem" "$CERTS/ca.pem" >"$CERTS/kafka-keystore.pem"
  chmod 600 "$CERTS"/*-key.pem "$CERTS/kafka-keystore.pem"
  chmod 644 "$CERTS"/ca.pem "$CERTS"/other-ca.pem
  touch "$CERTS/.complete"
  say "certificates generated in $CERTS"
}

# ---- credentials --------------------------------------------------------------------

credentials() {
  [[ -s $CREDS ]] && return 0
  any_running && die "$CREDS is missing while the secured servers run: run make down-secure first"
  # New passwords cannot match the users stored in existing data: start both anew.
  rm -rf "$SK/data"
  local dir
  if [[ -s $SO/node-dir ]]; then
    dir=$(<"$SO/node-dir")
    [[ -n $dir && -d $dir/data ]] && rm -rf "${dir:?}/data"
  fi
  mkdir -p "$SECURE"
  (
    umask 077
    cat >"$CREDS.tmp" <<EOF
KAFKA_SCRAM_USERNAME=stackstream
KAFKA_SCRAM_PASSWORD=$(openssl rand -hex 16)
OPENSEARCH_ADMIN_USERNAME=admin
OPENSEARCH_ADMIN_PASSWORD=$(openssl rand -hex 16)
OPENSEARCH_INDEXER_USERNAME=indexer
OPENSEARCH_INDEXER_PASSWORD=$(openssl rand -hex 16)
EOF
  )
  mv "$CREDS.tmp" "$CREDS"
  say "passwords generated in $CREDS"
}

load_credentials() {
  [[ -s $CREDS ]] || die "no credentials yet: run deploy/local/secure-up.sh"
  # shellcheck disable=SC1090
  source "$CREDS"
}

# ---- Kafka --------------------------------------------------------------------------

kafka_java() {
  local conf=$SK/tools-log4j2.properties
  if [[ ! -f $conf ]]; then
    mkdir -p "$SK"
    printf '%s\n' 'status = warn' 'appender.err.type = Console' 'appender.err.name = STDERR' \
      'appender.err.target = SYSTEM_ERR' 'appender.err.layout.type = PatternLayout' \
      'appender.err.layout.pattern = %p %m (%c)%n' 'rootLogger.level = warn' \
      'rootLogger.appenderRef.err.ref = STDERR' >"$conf"
  fi
  "$JAVA" -Xmx256m -Djava.awt.headless=true -Dlog4j2.configurationFile="$conf" -cp "$KAFKA_LIBS/*" "$@"
}

kafka_config() {
  mkdir -p "$SK/data"
  cat >"$SK/server.properties" <<EOF
# Generated by deploy/local/secure.sh on every start: edit that script, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
# Clients: SASL_SSL with SCRAM-SHA-512 (server-authenticated TLS) and SSL with a required
# client certificate. The broker talks to itself over SSL with its own certificate; the
# controller listener is loopback and internal to this one process.
listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_SASL_PORT,SSL://127.0.0.1:$SECURE_KAFKA_MTLS_PORT,CONTROLLER://127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_SASL_PORT,SSL://127.0.0.1:$SECURE_KAFKA_MTLS_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.ssl.ssl.client.auth=required
ssl.keystore.type=PEM
ssl.keystore.location=$CERTS/kafka-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
ssl.endpoint.identification.algorithm=https
ssl.enabled.protocols=TLSv1.3,TLSv1.2
log.dirs=$SK/data

EOF
  kafka_node_properties >>"$SK/server.properties"
  kafka_log4j2 "$SK"
  # librdkafka settings for kcat -F on the mTLS listener (the readiness probe, and
  # handy by hand).
  printf '%s\n' "security.protocol=SSL" "ssl.ca.location=$CERTS/ca.pem" \
    "ssl.certificate.location=$CERTS/client.pem" "ssl.key.location=$CERTS/client-key.pem" >"$SK/kcat-mtls.conf"
}

kafka_preflight() {
  pid_alive "$SK_PID" "$SK_MATCH" >/dev/null && return 0
  check_port_free "$SECURE_KAFKA_SASL_PORT" STACKSTREAM_SECURE_KAFKA_SASL_PORT
  check_port_free "$SECURE_KAFKA_MTLS_PORT" STACKSTREAM_SECURE_KAFKA_MTLS_PORT
  check_port_free "$SECURE_KAFKA_CONTROLLER_PORT" STACKSTREAM_SECURE_KAFKA_CONTROLLER_PORT
}

kafka_start() {
  local pid id
  if pid=$(pid_alive "$SK_PID" "$SK_MATCH"); then
    say "secured kafka already running (pid $pid)"
    return 0
  fi
  kafka_preflight
  "$LOCAL_DIR/kafka.sh" fetch
  load_credentials
  kafka_config
  # The SCRAM user is written into the metadata log when the storage is formatted,
  # before the broker first starts (SCRAM credentials live in KRaft metadata).
  if [[ ! -f $SK/data/meta.properties ]]; then
    id=$(kafka_java kafka.tools.StorageTool random-uuid)
    kafka_java kafka.tools.StorageTool format -t "$id" -c "$SK/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=\"$KAFKA_SCRAM_USERNAME\",password=\"$KAFKA_SCRAM_PASSWORD\"]" \
      >"$SK/format.log" 2>&1 ||
      { show_log_tail kafka "$SK/format.log"; die "secured kafka storage format failed"; }
    say "secured kafka storage formatted with SCRAM-SHA-512 user $KAFKA_SCRAM_USERNAME"
  fi
  [[ -f $SK_LOG ]] && mv -f "$SK_LOG" "$SK_LOG.1"
  cd "$SK"
  setsid nohup "$JAVA" -Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$SK/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$SK/server.properties" \
    >"$SK_LOG" 2>&1 </dev/null &
  echo $! >"$SK_PID"
  say "secured kafka starting (pid $!), log: $SK_LOG"
}

kafka_ready() {
  pid_alive "$SK_PID" "$SK_MATCH" >/dev/null && port_open "$SECURE_KAFKA_SASL_PORT" &&
    port_open "$SECURE_KAFKA_MTLS_PORT" && grep -q "Kafka Server started" "$SK_LOG" 2>/dev/null
}

# A metadata request through the mTLS listener, with the client certificate. (Not
# through SASL_SSL: Debian 12's kcat, librdkafka 2.0.2, fails SCRAM-SHA-512 against
# this broker while franz-go and Kafka's own clients pass; the tests cover that
# listener with franz-go.)
kafka_probe() {
  command -v kcat >/dev/null || return 0
  kcat -F "$SK/kcat-mtls.conf" -L -b "127.0.0.1:$SECURE_KAFKA_MTLS_PORT" -m 10 >/dev/null 2>&1
}

# ---- OpenSearch ---------------------------------------------------------------------

# The cached distribution plus the security plugin, installed once with opensearch-plugin.
os_fetch() {
  [[ -f $OS_SECURE_HOME/.complete ]] && return 0
  "$LOCAL_DIR/opensearch.sh" fetch
  say "installing the opensearch security plugin $SECURITY_PLUGIN_VERSION (once) into $OS_SECURE_HOME ..."
  local tmp=$OS_SECURE_HOME.tmp.$$
  rm -rf "$tmp"
  mkdir -p "$tmp/dl" "$tmp/zip" "$tmp/conf"
  (cd "$tmp/dl" && mvn_quiet dependency:copy \
    -Dartifact="org.opensearch.plugin:opensearch-security:$SECURITY_PLUGIN_VERSION:zip" \
    -DoutputDirectory="$tmp/dl") ||
    { rm -rf "$tmp"; die "could not download the opensearch security plugin (see the Maven output above)"; }
  unzip -q "$tmp/dl/opensearch-security-$SECURITY_PLUGIN_VERSION.zip" -d "$tmp/zip"
  sed -i -e '/^opensearch\.version=/d' "$tmp/zip/plugin-descriptor.properties"
  echo "dependencies={ opensearch: \"$SECURITY_PLUGIN_RANGE\" }" >>"$tmp/zip/plugin-descriptor.properties"
  (cd "$tmp/zip" && zip -q -r -X "$tmp/plugin.zip" .)
  # A hard-linked copy of the plain home: the plugin goes into a new plugins/ entry
  # and leaves the shared files alone.
  cp -al "$OS_BASE_HOME" "$tmp/home" 2>/dev/null || cp -a "$OS_BASE_HOME" "$tmp/home"
  rm -f "$tmp/home/.complete"
  cp -r "$OS_BASE_HOME/config/." "$tmp/conf/"
  (cd "$tmp/home" && env -u JAVA_TOOL_OPTIONS OPENSEARCH_JAVA_HOME="$JAVA_HOME_17" OPENSEARCH_PATH_CONF="$tmp/conf" \
    bin/opensearch-plugin install --batch "file://$tmp/plugin.zip" >"$tmp/install.log" 2>&1) ||
    { cat "$tmp/install.log" >&2; rm -rf "$tmp"; die "could not install the opensearch security plugin"; }
  # The plugin's default security configuration, from which each start takes the
  # files it does not write itself.
  cp -r "$tmp/conf/opensearch-security" "$tmp/home/security-defaults"
  touch "$tmp/home/.complete"
  rm -rf "$OS_SECURE_HOME"
  mv "$tmp/home" "$OS_SECURE_HOME"
  rm -rf "$tmp"
}

ensure_user() {
  id -u "$OPENSEARCH_USER" >/dev/null 2>&1 && return 0
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$OPENSEARCH_USER"
  say "created system user $OPENSEARCH_USER (runs OpenSearch, which refuses root)"
}

# As opensearch.sh: the state dir, unless the unprivileged user cannot reach it.
os_rundir() {
  mkdir -p "$SO"
  if "${as_user[@]}" test -x "$SO"; then
    echo "$SO/node"
  else
    echo "/var/lib/stackstream/opensearch-secure-$(echo "$SO" | cksum | cut -d' ' -f1)"
  fi
}

# bcrypt_hash VAR: the bcrypt hash of the password in the environment variable VAR,
# made by the plugin's own tool (the password is not put on a command line).
bcrypt_hash() {
  local plugin=$OS_SECURE_HOME/plugins/opensearch-security
  "$JAVA" -Xmx128m -cp "$plugin/*:$plugin/deps/*:$OS_SECURE_HOME/lib/*" \
    org.opensearch.security.tools.Hasher -env "$1" 2>/dev/null | tail -n 1
}

os_config() {
  local run=$1 sec=$1/config/opensearch-security
  mkdir -p "$run/config/certs" "$run/data" "$run/logs" "$sec"
  if [[ ! -f $run/home/.complete ]] || ! cmp -s "$run/home/plugins/opensearch-security/opensearch-security-$SECURITY_PLUGIN_VERSION.jar" \
    "$OS_SECURE_HOME/plugins/opensearch-security/opensearch-security-$SECURITY_PLUGIN_VERSION.jar"; then
    rm -rf "${run:?}/home"
    cp -al "$OS_SECURE_HOME" "$run/home" 2>/dev/null || cp -a "$OS_SECURE_HOME" "$run/home"
  fi
  cp "$OS_BASE_HOME/config/log4j2.properties" "$run/config/"
  sed -e 's/^-Xms.*/-Xms512m/' -e 's/^-Xmx.*/-Xmx1g/' \
    -e "s#HeapDumpPath=data#HeapDumpPath=$run/data#" \
    -e "s#file=logs/gc.log#file=$run/logs/gc.log#" -e "s#filecount=32,filesize=64m#filecount=4,filesize=16m#" \
    -e "s#ErrorFile=logs/#ErrorFile=$run/logs/#" \
    "$OS_BASE_HOME/config/jvm.options" >"$run/config/jvm.options"
  cp "$CERTS/ca.pem" "$CERTS/node.pem" "$CERTS/node-key.pem" "$run/config/certs/"
  cat >"$run/config/opensearch.yml" <<EOF
# Generated by deploy/local/secure.sh on every start: edit that script, not this file.
cluster.name: stackstream-secure
node.name: secure
network.host: 127.0.0.1
http.port: $SECURE_OS_PORT
transport.port: $SECURE_OS_TRANSPORT_PORT
discovery.type: single-node
path.data: $run/data
path.logs: $run/logs
cluster.routing.allocation.disk.threshold_enabled: false

# TLS on both layers with the generated certificates.
plugins.security.ssl.transport.pemcert_filepath: certs/node.pem
plugins.security.ssl.transport.pemkey_filepath: certs/node-key.pem
plugins.security.ssl.transport.pemtrustedcas_filepath: certs/ca.pem
plugins.security.ssl.transport.enforce_hostname_verification: false
plugins.security.ssl.http.enabled: true
plugins.security.ssl.http.pemcert_filepath: certs/node.pem
plugins.security.ssl.http.pemkey_filepath: certs/node-key.pem
plugins.security.ssl.http.pemtrustedcas_filepath: certs/ca.pem
plugins.security.nodes_dn: ["$NODE_DN"]
plugins.security.authcz.admin_dn: ["$ADMIN_DN"]
# The files in config/opensearch-security become the security index at first start
# (the data dir keeps it afterwards).
plugins.security.allow_default_init_securityindex: true
plugins.security.restapi.roles_enabled: ["all_access"]
plugins.security.system_indices.enabled: true
plugins.security.audit.type: noop
EOF
  # Users, roles and their mapping; the other files are the plugin's defaults.
  cp "$OS_SECURE_HOME/security-defaults/"*.yml "$sec/"
  rm -f "$sec/opensearch.yml.example"
  local admin_hash indexer_hash
  admin_hash=$(PW=$OPENSEARCH_ADMIN_PASSWORD bcrypt_hash PW)
  indexer_hash=$(PW=$OPENSEARCH_INDEXER_PASSWORD bcrypt_hash PW)
  [[ $admin_hash == \$2* && $indexer_hash == \$2* ]] || die "could not hash the opensearch passwords"
  cat >"$sec/config.yml" <<'EOF'
_meta:
  type: "config"
  config_version: 2
config:
  dynamic:
    http:
      anonymous_auth_enabled: false
    authc:
      basic_internal_auth_domain:
        description: "HTTP basic auth against internal_users.yml"
        http_enabled: true
        transport_enabled: true
        order: 0
        http_authenticator:
          type: basic
          challenge: true
        authentication_backend:
          type: intern
EOF
  cat >"$sec/internal_users.yml" <<EOF
_meta:
  type: "internalusers"
  config_version: 2
$OPENSEARCH_ADMIN_USERNAME:
  hash: "$admin_hash"
  reserved: true
  description: "all_access: test set-up and clean-up"
$OPENSEARCH_INDEXER_USERNAME:
  hash: "$indexer_hash"
  reserved: false
  description: "stackstream-indexer: role stackstream_indexer only"
EOF
  cat >"$sec/roles.yml" <<EOF
_meta:
  type: "roles"
  config_version: 2
# What stackstream-indexer does and nothing more: at start-up it reads the cluster's
# root endpoint and puts its index templates (cluster-wide actions: the plugin cannot
# scope templates to a prefix), then bulk-writes documents, creates its daily indices,
# updates their mappings, lists, deletes and force-merges its expired ones, and
# deletes unused stacks by query (a scroll: cluster-wide actions too). Index rights
# are limited to its prefix.
stackstream_indexer:
  reserved: false
  cluster_permissions:
    - "cluster:monitor/main"
    - "cluster:monitor/health"
    - "cluster:monitor/state"
    - "indices:admin/index_template/get"
    - "indices:admin/index_template/put"
    - "indices:data/write/bulk"
    - "indices:data/read/scroll"
    - "indices:data/read/scroll/clear"
  index_permissions:
    - index_patterns:
        - "$INDEXER_PREFIX*"
      allowed_actions:
        - "indices:data/write/*"
        - "indices:data/read/*"
        - "indices:admin/create"
        - "indices:admin/mapping/put"
        - "indices:admin/mappings/get"
        - "indices:admin/get"
        - "indices:admin/refresh*"
        - "indices:admin/delete"
        - "indices:admin/forcemerge"
        - "indices:monitor/*"
EOF
  cat >"$sec/roles_mapping.yml" <<EOF
_meta:
  type: "rolesmapping"
  config_version: 2
all_access:
  reserved: false
  users:
    - "$OPENSEARCH_ADMIN_USERNAME"
stackstream_indexer:
  reserved: false
  users:
    - "$OPENSEARCH_INDEXER_USERNAME"
EOF
  if [[ $(id -u) == 0 ]]; then
    chown -R "$OPENSEARCH_USER:" "$run/config" "$run/data" "$run/logs"
  fi
  chmod 600 "$run/config/certs/node-key.pem"
  # curl settings for the readiness checks and by hand: curl -K <file> URL.
  (
    umask 077
    printf 'user = "%s:%s"\ncacert = "%s"\n' "$OPENSEARCH_ADMIN_USERNAME" "$OPENSEARCH_ADMIN_PASSWORD" "$CERTS/ca.pem" >"$SO/curl-admin.conf"
  )
}

os_preflight() {
  pid_alive "$SO_PID" "$SO_MATCH" >/dev/null && return 0
  check_port_free "$SECURE_OS_PORT" STACKSTREAM_SECURE_OPENSEARCH_PORT
  check_port_free "$SECURE_OS_TRANSPORT_PORT" STACKSTREAM_SECURE_OPENSEARCH_TRANSPORT_PORT
}

os_start() {
  local pid run
  if pid=$(pid_alive "$SO_PID" "$SO_MATCH"); then
    say "secured opensearch already running (pid $pid) on $SO_URL"
    return 0
  fi
  os_preflight
  os_fetch
  load_credentials
  if [[ $(id -u) == 0 ]]; then ensure_user; fi
  run=$(os_rundir)
  # An empty data dir means the plugin loads config/opensearch-security at this start.
  if [[ -z $(ls -A "$run/data" 2>/dev/null) ]]; then touch "$SO/fresh"; else rm -f "$SO/fresh"; fi
  os_config "$run"
  echo "$run" >"$SO/node-dir"
  launch_opensearch "$run" "$SO_LOG" "$SO_PID"
  say "secured opensearch starting (pid $(cat "$SO_PID")), log: $SO_LOG"
}

# Ready once the admin user is authenticated (so the security index is loaded) and
# the cluster is at least yellow.
os_ready() {
  [[ -s $SO/curl-admin.conf ]] &&
    curl -fsS --max-time 5 -K "$SO/curl-admin.conf" -o /dev/null \
      "$SO_URL/_cluster/health?wait_for_status=yellow&timeout=2s" 2>/dev/null
}

# The security index keeps the configuration of the first start; when roles, their
# mapping, authentication or the passwords changed since, push the files with the
# plugin's securityadmin tool, authenticated by the admin certificate.
security_sum() {
  local sec=$1/config/opensearch-security
  cat "$sec/config.yml" "$sec/roles.yml" "$sec/roles_mapping.yml" "$CREDS" | sha256sum | cut -d' ' -f1
}

os_sync() {
  local run sum
  run=$(<"$SO/node-dir")
  sum=$(security_sum "$run")
  if [[ -f $SO/fresh ]]; then
    rm -f "$SO/fresh"
  elif [[ $(cat "$SO/security.sum" 2>/dev/null) != "$sum" ]]; then
    say "security configuration changed since the node's first start: applying it with securityadmin"
    OPENSEARCH_JAVA_HOME=$JAVA_HOME_17 bash "$run/home/plugins/opensearch-security/tools/securityadmin.sh" \
      -cd "$run/config/opensearch-security" -icl -nhnv -cacert "$CERTS/ca.pem" \
      -cert "$CERTS/admin.pem" -key "$CERTS/admin-key.pem" -h 127.0.0.1 -p "$SECURE_OS_PORT" \
      >"$SO/securityadmin.log" 2>&1 || { show_log_tail securityadmin "$SO/securityadmin.log"; die "securityadmin failed"; }
  fi
  echo "$sum" >"$SO/security.sum"
}

# ---- state file, status -------------------------------------------------------------

write_env() {
  load_credentials
  (
    umask 077
    cat >"$ENV_FILE.tmp" <<EOF
# Written by deploy/local/secure-up.sh: where the secured servers listen and how to
# reach them. Tests read it (pkg/testenv.Secure); it holds passwords, keep it private.
SECURE_CA_FILE=$CERTS/ca.pem
SECURE_CLIENT_CERT_FILE=$CERTS/client.pem
SECURE_CLIENT_KEY_FILE=$CERTS/client-key.pem
SECURE_OTHER_CA_FILE=$CERTS/other-ca.pem
SECURE_OTHER_CLIENT_CERT_FILE=$CERTS/other-client.pem
SECURE_OTHER_CLIENT_KEY_FILE=$CERTS/other-client-key.pem
SECURE_KAFKA_SASL_BROKERS=127.0.0.1:$SECURE_KAFKA_SASL_PORT
SECURE_KAFKA_MTLS_BROKERS=127.0.0.1:$SECURE_KAFKA_MTLS_PORT
SECURE_KAFKA_SCRAM_USERNAME=$KAFKA_SCRAM_USERNAME
SECURE_KAFKA_SCRAM_PASSWORD=$KAFKA_SCRAM_PASSWORD
SECURE_OPENSEARCH_URL=$SO_URL
SECURE_OPENSEARCH_ADMIN_USERNAME=$OPENSEARCH_ADMIN_USERNAME
SECURE_OPENSEARCH_ADMIN_PASSWORD=$OPENSEARCH_ADMIN_PASSWORD
SECURE_OPENSEARCH_INDEXER_USERNAME=$OPENSEARCH_INDEXER_USERNAME
SECURE_OPENSEARCH_INDEXER_PASSWORD=$OPENSEARCH_INDEXER_PASSWORD
SECURE_OPENSEARCH_INDEXER_PREFIX=$INDEXER_PREFIX
EOF
  )
  mv "$ENV_FILE.tmp" "$ENV_FILE"
  echo "$ENV_FILE"
}

status() {
  local pid
  if pid=$(pid_alive "$SK_PID" "$SK_MATCH"); then
    echo "secure kafka       running  pid $pid  SASL_SSL 127.0.0.1:$SECURE_KAFKA_SASL_PORT, mTLS :$SECURE_KAFKA_MTLS_PORT  (log $SK_LOG)"
  else
    echo "secure kafka       stopped"
  fi
  if pid=$(pid_alive "$SO_PID" "$SO_MATCH"); then
    echo "secure opensearch  running  pid $pid  $SO_URL  (log $SO_LOG)"
  else
    echo "secure opensearch  stopped"
  fi
}

case ${1:-} in
  certs) certs ;;
  credentials) credentials ;;
  fetch) "$LOCAL_DIR/kafka.sh" fetch && os_fetch ;;
  preflight) kafka_preflight && os_preflight ;;
  kafka-start) kafka_start ;;
  kafka-ready) kafka_ready ;;
  kafka-probe) kafka_probe ;;
  kafka-running) pid_alive "$SK_PID" "$SK_MATCH" ;;
  kafka-stop) stop_pid "secured kafka" "$SK_PID" "$SK_MATCH" ;;
  os-start) os_start ;;
  os-ready) os_ready ;;
  os-running) pid_alive "$SO_PID" "$SO_MATCH" ;;
  os-sync) os_sync ;;
  os-stop) stop_pid "secured opensearch" "$SO_PID" "$SO_MATCH" ;;
  status) status ;;
  env) write_env ;;
  log) case ${2:-} in kafka) echo "$SK_LOG" ;; opensearch) echo "$SO_LOG" ;; *) exit 2 ;; esac ;;
  *) echo "usage: $0 certs|credentials|fetch|preflight|kafka-start|kafka-ready|kafka-probe|kafka-running|kafka-stop|os-start|os-ready|os-running|os-sync|os-stop|status|env|log kafka|opensearch" >&2; exit 2 ;;
esac
