#!/usr/bin/env bash
# Stop the secured Kafka and OpenSearch started by secure-up.sh (make down-secure).
# Idempotent. Certificates, passwords and data stay in $STATE_DIR/secure (.run/secure):
# delete it for new ones.
set -euo pipefail
export SCRIPT_NAME=down-secure
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$LOCAL_DIR/secure.sh" os-stop &
os=$!
"$LOCAL_DIR/secure.sh" kafka-stop &
kafka=$!
rc=0
wait "$os" || rc=1
wait "$kafka" || rc=1
exit $rc
