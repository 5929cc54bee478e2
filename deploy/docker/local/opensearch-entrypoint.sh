#!/bin/bash
# Entry point of the local OpenSearch image (deploy/docker/local-images.sh), with the
# convention of the official opensearchproject/opensearch image, so docker-compose.yml's
# settings apply unchanged: every variable whose name holds a dot (discovery.type,
# http.port, ...) is a setting (-E name=value); OPENSEARCH_JAVA_OPTS adds JVM options.
# The distribution has no security plugin, so DISABLE_SECURITY_PLUGIN and
# DISABLE_INSTALL_DEMO_CONFIG have nothing to do.
set -euo pipefail

settings=()
# Names with a dot are not shell variables: read them from env.
while IFS= read -r -d '' kv; do
  name=${kv%%=*}
  [[ $name == *.* ]] && settings+=("-E" "$kv")
done < <(env -0)

OPENSEARCH_JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
export OPENSEARCH_JAVA_HOME
cd /usr/share/opensearch
exec bin/opensearch "${settings[@]}" "$@"
