# Kafka for `make e2e-compose`: the local base (Debian packages: a JRE, kcat for the
# health check) and the jars deploy/local/kafka.sh downloads. Built by
# deploy/docker/local-images.sh from a context it stages; no registry image.
ARG BASE
FROM $BASE
COPY libs/ /opt/kafka/libs/
COPY log4j2.properties /opt/kafka/config/log4j2.properties
COPY kafka-entrypoint.sh /usr/local/bin/kafka-entrypoint
# The base's unprivileged user; /var/lib/stackstream is its.
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/kafka-entrypoint"]
