#!/usr/bin/env bash
# The CI step of `make e2e-compose` (.ci/run calls it, as root, after apt-get update):
# installs Debian's docker.io, docker-compose (1.29) and mmdebstrap, starts dockerd
# without a bridge or iptables rules unless an engine already answers, runs
# make e2e-compose, and stops the dockerd it started.
#
#   ci-e2e-compose.sh prepare   only the packages and the base image's root file
#                               system (mmdebstrap, minutes of mostly waiting): .ci/run
#                               starts it in the background before the other tests
#   ci-e2e-compose.sh           the step itself (after prepare, if it ran, ended)
#
# Exit status: 0 passed, 3 not run because no Docker engine could start here (the
# reason is printed; .ci/run reports it again at the end), anything else failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

NOT_RUN=3
not_run() {
  echo "ci: e2e-compose NOT RUN: $*"
  exit "$NOT_RUN"
}

[[ $(id -u) == 0 ]] || not_run "not root (dockerd and the agent's capabilities need root)"

export DEBIAN_FRONTEND=noninteractive
t=$SECONDS
if ! apt-get -y -q --no-install-recommends -o Dpkg::Use-Pty=0 -o DPkg::Lock::Timeout=600 \
  install docker.io docker-compose mmdebstrap >/tmp/ci-apt-docker.log 2>&1; then
  tail -n 10 /tmp/ci-apt-docker.log
  not_run "could not install docker.io, docker-compose and mmdebstrap (log: /tmp/ci-apt-docker.log)"
fi
echo "ci: docker.io, docker-compose, mmdebstrap installed in $((SECONDS - t))s"
if [[ ${1:-} == prepare ]]; then
  deploy/docker/local-images.sh base-tar
  exit 0
fi

dockerd_pid=
stop_dockerd() {
  [[ -n $dockerd_pid ]] && kill -0 "$dockerd_pid" 2>/dev/null || return 0
  kill -TERM "$dockerd_pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$dockerd_pid" 2>/dev/null && kill -KILL "$dockerd_pid" 2>/dev/null || true
  echo "ci: dockerd (pid $dockerd_pid) stopped"
}
trap stop_dockerd EXIT

if docker info >/dev/null 2>&1; then
  echo "ci: a Docker engine already answers; using it"
else
  # No bridge and no iptables: containers use the host's network only.
  setsid dockerd --bridge=none --iptables=false >/tmp/ci-dockerd.log 2>&1 </dev/null &
  dockerd_pid=$!
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    echo "---- last lines of /tmp/ci-dockerd.log ----"
    tail -n 15 /tmp/ci-dockerd.log
    not_run "dockerd --bridge=none --iptables=false did not start (log: /tmp/ci-dockerd.log)"
  fi
  echo "ci: dockerd $(docker version --format '{{.Server.Version}}') started (pid $dockerd_pid, log /tmp/ci-dockerd.log)"
fi

make e2e-compose
