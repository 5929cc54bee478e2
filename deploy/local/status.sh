#!/usr/bin/env bash
# One line per local service: running/stopped, pid, address and, for OpenSearch, the
# cluster health (make status). Exit code 0 only if both are running.
set -euo pipefail
export SCRIPT_NAME=status
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$LOCAL_DIR/kafka.sh" status
"$LOCAL_DIR/opensearch.sh" status
"$LOCAL_DIR/services.sh" status
"$LOCAL_DIR/kafka.sh" running >/dev/null && "$LOCAL_DIR/opensearch.sh" running >/dev/null
