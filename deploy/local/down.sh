#!/usr/bin/env bash
# Stop the services started by make run, then the local Kafka and OpenSearch
# started by up.sh (make down). Idempotent.
# Data stays in the state dir (.run/); delete it for a clean slate.
set -euo pipefail
export SCRIPT_NAME=down
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The stackstream services first, so none of them sees its backends vanish.
"$LOCAL_DIR/services.sh" stop

# Both at once: each may take a few seconds to shut down cleanly.
"$LOCAL_DIR/opensearch.sh" stop &
os=$!
"$LOCAL_DIR/kafka.sh" stop &
kafka=$!
rc=0
wait "$os" || rc=1
wait "$kafka" || rc=1
exit $rc
