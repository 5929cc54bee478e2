#!/bin/bash
# Entry point of the local Kafka image (deploy/docker/local-images.sh): one KRaft node
# (broker + controller) configured from the environment with the convention of the
# official apache/kafka image, so docker-compose.yml's settings apply unchanged:
# KAFKA_FOO_BAR=v becomes foo.bar=v (a double underscore stands for "_", a triple one
# for "-"); KAFKA_HEAP_OPTS and KAFKA_OPTS are JVM options, CLUSTER_ID the cluster id.
set -euo pipefail

state=/var/lib/stackstream/kafka
conf=$state/server.properties
export KAFKA_LOG_DIRS=${KAFKA_LOG_DIRS:-$state/data}
mkdir -p "$KAFKA_LOG_DIRS"

{
  echo "# Generated from KAFKA_* variables by kafka-entrypoint.sh"
  for name in $(compgen -e | grep '^KAFKA_' | sort); do
    case $name in KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_LOG4J_OPTS) continue ;; esac
    key=${name#KAFKA_}
    key=${key,,}
    key=${key//___/-}
    key=${key//__/@}
    key=${key//_/.}
    echo "${key//@/_}=${!name}"
  done
} >"$conf"

java=(java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} ${KAFKA_OPTS:-} -Djava.awt.headless=true
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*')

# KRaft storage is formatted once, with a cluster id: 16 random bytes in URL-safe
# base64 without padding, the form Kafka's own random-uuid prints. Like it, an id
# starting with "-" is drawn again: the format tool would read it as an option
# (1 start in 64 failed with "argument --cluster-id/-t: expected one argument").
if [[ ! -f $KAFKA_LOG_DIRS/meta.properties ]]; then
  id=${CLUSTER_ID:-}
  while [[ -z $id || $id == -* ]] && [[ -z ${CLUSTER_ID:-} ]]; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  echo "kafka-entrypoint: formatting $KAFKA_LOG_DIRS (cluster id $id)"
  "${java[@]}" kafka.tools.StorageTool format -t "$id" -c "$conf"
fi
exec "${java[@]}" kafka.Kafka "$conf"
