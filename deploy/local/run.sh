#!/usr/bin/env bash
# make run: the whole pipeline on this host. Expects make build and make up to
# have run (the Makefile does both first); creates the topics and templates,
# starts every built service, and prints where to look.
set -euo pipefail
export SCRIPT_NAME=run
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$REPO_ROOT/bin/stackctl" init
"$LOCAL_DIR/services.sh" start

cat <<EOT
run: the pipeline is running.
run:   UI and API   http://127.0.0.1:8080/
run:   Pyroscope    push to http://127.0.0.1:4040 (stackstream-ingest, docs/INGEST.md)
run:   status       bin/stackctl status
run:   logs         $STATE_DIR/services/*.log
run:   stop         make down
EOT
