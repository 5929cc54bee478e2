#!/usr/bin/env bash
# Benchmark of stackstream-agent's own cost: CPU (% of one core, from
# /proc/PID/stat utime+stime over the measured span) and RSS (peak VmHWM and
# VmRSS at the end), at 19 Hz and 99 Hz, on two workloads:
#   busy   two long-running CPU-bound processes (both cores busy)
#   churn  `go build -a std` in a loop with a fresh GOCACHE (both cores busy
#          with many short-lived processes)
#   langs  a Python, a Java and a Node service at once, each CPU-bound with a
#          deep call chain: what naming their frames (interpreter walks in BPF,
#          code objects, methods and functions read from the processes) costs
# and two target sets:
#   all    every process (the default): on a shared machine this includes
#          other people's work, whose fresh binaries the agent must read
#   unit   only the workload, placed in a cgroup named like a systemd unit
#          (--systemd-units): what a dedicated host would cost
# The agent publishes to Kafka under a throw-away topic prefix, created and
# deleted here.
#
# Needs root (eBPF) and a Kafka broker (STACKSTREAM_KAFKA_BROKERS, default
# 127.0.0.1:9092). WARMUP and SPAN (seconds) set each run's length; RATES
# (default "19 99") and WORKLOADS (default "busy churn langs") pick the runs.
set -euo pipefail

WARMUP=${WARMUP:-12}
SPAN=${SPAN:-30}
HERE=$(cd "$(dirname "$0")" && pwd)
MODULE=$(cd "$HERE/.." && pwd)
WORK=$(mktemp -d /tmp/stackstream-agent-bench.XXXXXX)
PREFIX="agentbench-$$-$(date +%s)."
export STACKSTREAM_KAFKA_TOPIC_PREFIX=$PREFIX

if [ "$(id -u)" != 0 ]; then
	echo "agent bench: skipped, needs root (eBPF)" >&2
	exit 0
fi

pids_to_stop=()
UNIT=stackstream-bench-$$.service
UNIT_DIR=
# The workload's cgroup: systemd is not PID 1 here, so make the unit's cgroup
# by hand where systemd would (named hierarchy on v1, unified on v2).
for root in /sys/fs/cgroup/systemd /sys/fs/cgroup; do
	if [ -w "$root/cgroup.procs" ]; then
		UNIT_DIR=$root/stackstream-bench.slice/$UNIT
		CGROUP_ROOT=$root
		break
	fi
done
cleanup() {
	for p in "${pids_to_stop[@]}"; do
		# Workloads run in their own process group (setsid): stop the group.
		kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true
	done
	"$WORK/topics" delete "$PREFIX" >/dev/null 2>&1 || true
	[ -n "$UNIT_DIR" ] && rmdir "$UNIT_DIR" "$(dirname "$UNIT_DIR")" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

(cd "$MODULE" && go build -o "$WORK/stackstream-agent" ./cmd/stackstream-agent && go build -o "$WORK/topics" ./bench/topics)

# The langs workload's programs: recursion a few levels deep under a short
# chain, as a service's handlers would be.
cat >"$WORK/hot.py" <<'EOF'
def hot(n):
    if n > 0:
        return hot(n - 1)
    s = 0
    for i in range(20000):
        s += i * i
    return s
def serve():
    while True:
        hot(8)
serve()
EOF
cat >"$WORK/hot.js" <<'EOF'
function hot(n) { if (n > 0) return hot(n - 1); let s = 0; for (let i = 0; i < 200000; i++) s += i * i; return s; }
function serve() { for (;;) hot(8); }
serve();
EOF
cat >"$WORK/Hot.java" <<'EOF'
public class Hot {
    static long hot(int n) { if (n > 0) return hot(n - 1); long s = 0; for (int i = 0; i < 200000; i++) s += (long) i * i; return s; }
    public static void main(String[] a) { long t = 0; for (;;) t += hot(8); }
}
EOF
LANGS=1
for tool in python3 node java javac; do
	command -v "$tool" >/dev/null || { echo "agent bench: no $tool, the langs workload is left out" >&2; LANGS=; }
done
[ -n "$LANGS" ] && javac -d "$WORK" "$WORK/Hot.java"
"$WORK/topics" create "$PREFIX"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
forks() { awk '/^processes/ {print $2}' /proc/stat; }
# Binaries whose symbols the agent read (new build IDs): on a shared machine
# other people's fresh test binaries cost the agent CPU that the workload
# does not explain.
debuginfo_read() { curl -s "http://$1/metrics" | awk '/^stackstream_agent_debuginfo_total/ {n += $2} END {print n + 0}'; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

# start_workload NAME [CGROUP_PROCS]: the workload joins the cgroup itself,
# before it forks anything.
start_workload() {
	local join=":"
	if [ -n "${2:-}" ]; then
		join="echo \$\$ >'$2'"
	fi
	case "$1" in
	busy)
		setsid bash -c "$join; for i in 1 2; do (while :; do :; done) & done; wait" </dev/null >/dev/null 2>&1 &
		;;
	churn)
		setsid bash -c "$join; cd '$WORK' && while :; do c=\$(mktemp -d '$WORK/gocache.XXXXXX'); GOCACHE=\$c GOFLAGS= GOWORK=off go build -a std; rm -rf \"\$c\"; done" </dev/null >/dev/null 2>&1 &
		;;
	langs)
		setsid bash -c "$join; python3 '$WORK/hot.py' & node '$WORK/hot.js' & java -cp '$WORK' Hot & wait" </dev/null >/dev/null 2>&1 &
		;;
	esac
	echo $!
}

results=()
for hz in ${RATES:-19 99}; do
	for wl in ${WORKLOADS:-busy churn ${LANGS:+langs}}; do
	for targets in all unit; do
		if [ "$targets" = unit ] && [ -z "$UNIT_DIR" ]; then
			continue
		fi
		args=()
		procs=
		if [ "$targets" = unit ]; then
			mkdir -p "$UNIT_DIR"
			procs=$UNIT_DIR/cgroup.procs
			args=(--systemd-units "$UNIT")
		fi
		wpid=$(start_workload "$wl" "$procs")
		pids_to_stop+=("$wpid")
		sleep 3
		STACKSTREAM_LISTEN_ADDR=127.0.0.1:0 "$WORK/stackstream-agent" --frequency "$hz" --interval 10s "${args[@]}" >"$WORK/agent-$hz-$wl.log" 2>&1 &
		apid=$!
		sleep "$WARMUP"
		if ! kill -0 "$apid" 2>/dev/null; then
			echo "agent exited during warm-up:" >&2
			cat "$WORK/agent-$hz-$wl.log" >&2
			exit 1
		fi
		addr=$(sed -n 's/.*msg=listening.* addr=\([0-9.:]*\).*/\1/p' "$WORK/agent-$hz-$wl.log" | head -1)
		t0=$(cpu_ticks "$apid"); f0=$(forks); s0=$(date +%s.%N); d0=$(debuginfo_read "$addr")
		sleep "$SPAN"
		t1=$(cpu_ticks "$apid"); f1=$(forks); s1=$(date +%s.%N); d1=$(debuginfo_read "$addr")
		hwm=$(status_kb "$apid" VmHWM); rss=$(status_kb "$apid" VmRSS)
		kill -TERM "$apid"; wait "$apid" || true
		kill -- "-$wpid" 2>/dev/null || true
		wait "$wpid" 2>/dev/null || true
		if [ "$targets" = unit ]; then
			# Move stragglers out so the cgroup can be removed at the end.
			for p in $(cat "$UNIT_DIR/cgroup.procs" 2>/dev/null); do echo "$p" >"$CGROUP_ROOT/cgroup.procs" 2>/dev/null || true; done
		fi
		hz_ticks=$(getconf CLK_TCK)
		results+=("$(awk -v hz="$hz" -v wl="$wl" -v tg="$targets" -v t="$((t1 - t0))" -v tck="$hz_ticks" -v s0="$s0" -v s1="$s1" \
			-v f="$((f1 - f0))" -v hwm="$hwm" -v rss="$rss" -v d="$((d1 - d0))" 'BEGIN {
			span = s1 - s0
			printf "%-4s %-6s %-5s %9.2f %12.1f %12.1f %10.0f %12d %8.0f\n", hz, wl, tg, 100 * t / tck / span, hwm / 1024, rss / 1024, f / span, d, span
		}')")
		echo "done: ${hz} Hz, $wl, $targets" >&2
	done
	done
done

echo "stackstream-agent overhead ($(nproc) CPUs, $(uname -r); shared machine, other work running)"
printf "%-4s %-6s %-5s %9s %12s %12s %10s %12s %8s\n" "Hz" "load" "targets" "CPU%core" "maxRSS_MiB" "endRSS_MiB" "forks/s" "new_binaries" "span_s"
printf "%s\n" "${results[@]}"
