# OpenSearch for `make e2e-compose`: the local base (Debian packages: a JRE, curl for
# the health check) and the distribution deploy/local/opensearch.sh assembles from
# Maven, at the official image's path (/usr/share/opensearch, data in data/). Built by
# deploy/docker/local-images.sh from a context it stages; no registry image.
ARG BASE
FROM $BASE
# OpenSearch refuses root and writes its keystore into config/, logs/ and data/.
COPY --chown=1000:1000 opensearch/ /usr/share/opensearch/
COPY opensearch.yml /usr/share/opensearch/config/opensearch.yml
COPY opensearch-entrypoint.sh /usr/local/bin/opensearch-entrypoint
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/opensearch-entrypoint"]
