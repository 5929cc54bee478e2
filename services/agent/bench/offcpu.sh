#!/usr/bin/env bash
# Benchmark of off-CPU profiling's cost on a context-switch-heavy workload:
# two processes ping-ponging one byte over two pipes, both pinned to one CPU
# (every round trip is two context switches on it). For each setting the
# agent (19 Hz, every process targeted, 10 s intervals) runs PROBABILITIES
# (default "none 0 0.01 none 0.001 0.1 none 1"; "none": no agent at all, "0":
# the agent with off-CPU off), and the table gives:
#   rounds/s     ping-pong round trips per second (the workload's own count)
#   slowdown%    against the last run without an agent (noisy on a shared machine)
#   switches/s   context switches per second on the host (/proc/stat ctxt)
#   agent%       the agent process's CPU, % of one core (utime+stime)
#   bpf_cpu%     run time of all its BPF programs, % of one core
#   offcpu%      ... of the sched_switch program alone
#   ns/switch    the sched_switch program's mean run time per call
# kernel.bpf_stats_enabled is on during the runs (it adds a little to every
# program). Needs root, gcc, bpftool and a Kafka broker
# (STACKSTREAM_KAFKA_BROKERS, default 127.0.0.1:9092); WARMUP and SPAN
# (seconds, default 25 and 20) set each run's length: the warm-up outlasts
# the agent's start-up pass over the host's binaries. AGENT_ARGS (default
# "--comm ^pingpong$") narrows what the agent publishes, so other work on a
# shared machine (fresh binaries to read) stays out of agent%; the BPF
# program records every thread's switches whatever the targets. Progress
# goes to stderr.
set -euo pipefail

WARMUP=${WARMUP:-25}
SPAN=${SPAN:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
MODULE=$(cd "$HERE/.." && pwd)
WORK=$(mktemp -d /tmp/stackstream-offcpu-bench.XXXXXX)
PREFIX="offcpubench-$$-$(date +%s)."
export STACKSTREAM_KAFKA_TOPIC_PREFIX=$PREFIX

if [ "$(id -u)" != 0 ]; then
	echo "offcpu bench: skipped, needs root (eBPF)" >&2
	exit 0
fi
for tool in gcc bpftool taskset; do
	command -v "$tool" >/dev/null || { echo "offcpu bench: needs $tool" >&2; exit 1; }
done

BPF_STATS=$(sysctl -n kernel.bpf_stats_enabled)
apid=
cleanup() {
	[ -n "$apid" ] && kill "$apid" 2>/dev/null || true
	"$WORK/topics" delete "$PREFIX" >/dev/null 2>&1 || true
	sysctl -qw kernel.bpf_stats_enabled="$BPF_STATS" || true
	rm -rf "$WORK"
}
trap cleanup EXIT

(cd "$MODULE" && go build -o "$WORK/stackstream-agent" ./cmd/stackstream-agent && go build -o "$WORK/topics" ./bench/topics)
cat >"$WORK/pingpong.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
	double span = argc > 1 ? atof(argv[1]) : 10;
	int a[2], b[2];
	char c = 0;
	if (pipe(a) || pipe(b)) return 1;
	pid_t child = fork();
	if (child == 0) {
		for (;;) {
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) _exit(0);
		}
	}
	double t0 = now(), t = t0;
	long n = 0;
	while (t - t0 < span) {
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
		if ((++n & 1023) == 0) t = now();
	}
	kill(child, SIGKILL);
	printf("%.0f\n", n / (t - t0));
	return 0;
}
EOF
gcc -O2 -o "$WORK/pingpong" "$WORK/pingpong.c"
"$WORK/topics" create "$PREFIX"
sysctl -qw kernel.bpf_stats_enabled=1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
# bpf_stats PID: "total_ns offcpu_ns offcpu_calls" over the programs PID holds.
bpf_stats() {
	for f in /proc/"$1"/fdinfo/*; do
		awk '/^prog_id:/ {id = $2} /^run_time_ns:/ {ns = $2} /^run_cnt:/ {n = $2} END {if (id != "" && ns != "") print id, ns, n}' "$f" 2>/dev/null
	done | sort -u -k1,1 | while read -r id ns n; do
		name=$(bpftool prog show id "$id" 2>/dev/null | sed -n 's/.* name \([a-z_0-9]*\) .*/\1/p' | head -1)
		echo "$name $ns $n"
	done | awk '{t += $2} $1 == "offcpu_switch" {o += $2; c += $3} END {printf "%.0f %.0f %.0f\n", t, o, c}'
}

base=
results=()
for p in ${PROBABILITIES:-none 0 0.01 none 0.001 0.1 none 1}; do
	apid=
	if [ "$p" != none ]; then
		STACKSTREAM_LISTEN_ADDR=127.0.0.1:0 STACKSTREAM_AGENT_OFFCPU_PROBABILITY=$p "$WORK/stackstream-agent" --frequency 19 --interval 10s \
			${AGENT_ARGS:---comm ^pingpong$} >"$WORK/agent-$p.log" 2>&1 &
		apid=$!
		sleep "$WARMUP"
		if ! kill -0 "$apid" 2>/dev/null; then
			echo "agent exited during warm-up:" >&2
			cat "$WORK/agent-$p.log" >&2
			exit 1
		fi
		t0=$(cpu_ticks "$apid"); read -r b0 o0 c0 <<<"$(bpf_stats "$apid")"
	fi
	x0=$(ctxt); s0=$(date +%s.%N)
	rounds=$(taskset -c 0 "$WORK/pingpong" "$SPAN")
	x1=$(ctxt); s1=$(date +%s.%N)
	agent=- bpf=- off=- per=-
	if [ -n "$apid" ]; then
		t1=$(cpu_ticks "$apid"); read -r b1 o1 c1 <<<"$(bpf_stats "$apid")"
		kill -TERM "$apid"; wait "$apid" || true
		apid=
		read -r agent bpf off per <<<"$(awk -v t="$((t1 - t0))" -v tck="$(getconf CLK_TCK)" -v s0="$s0" -v s1="$s1" \
			-v b="$(awk -v x="$b1" -v y="$b0" 'BEGIN {printf "%.0f", x - y}')" -v o="$(awk -v x="$o1" -v y="$o0" 'BEGIN {printf "%.0f", x - y}')" \
			-v c="$(awk -v x="$c1" -v y="$c0" 'BEGIN {printf "%.0f", x - y}')" 'BEGIN {
			span = s1 - s0
			printf "%.2f %.2f %.2f %s\n", 100 * t / tck / span, 100 * b / 1e9 / span, 100 * o / 1e9 / span, (c > 0 ? sprintf("%.0f", o / c) : "-")
		}')"
	fi
	# Against the last run without an agent: list "none" between the
	# others to follow the machine's load.
	[ "$p" = none ] && base=$rounds
	[ -z "$base" ] && base=$rounds
	results+=("$(awk -v p="$p" -v r="$rounds" -v base="$base" -v x="$((x1 - x0))" -v s0="$s0" -v s1="$s1" -v a="$agent" -v b="$bpf" -v o="$off" -v n="$per" 'BEGIN {
		printf "%-7s %10d %10.1f %11.0f %8s %9s %8s %10s\n", p, r, 100 * (base - r) / base, x / (s1 - s0), a, b, o, n
	}')")
	echo "done: probability $p ($rounds rounds/s)" >&2
done

echo "off-CPU overhead on a pipe ping-pong pinned to one CPU ($(nproc) CPUs, $(uname -r); shared machine, other work running)"
printf "%-7s %10s %10s %11s %8s %9s %8s %10s\n" "offcpu" "rounds/s" "slowdown%" "switches/s" "agent%" "bpf_cpu%" "offcpu%" "ns/switch"
printf "%s\n" "${results[@]}"
