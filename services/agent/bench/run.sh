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
# (bpf%core: the run time of the agent's BPF programs, run_time_ns with
# kernel.bpf_stats_enabled, which the kernel charges to the interrupted
# processes rather than to the agent; off-CPU profiling's sched_switch
# program included unless STACKSTREAM_AGENT_OFFCPU_PROBABILITY=0 is set) and
# two target sets:
#   all    every process (the default): on a shared machine this includes
#          other people's work, whose fresh binaries the agent must read
#   unit   only the workload, placed in a cgroup named like a systemd unit
#          (--systemd-units): what a dedicated host would cost
# The agent publishes to Kafka under a throw-away topic prefix, created and
# deleted here.
#
# Then the unwinding table (issue 12), one row per workload running alone in
# the unit's cgroup, the agent (19 Hz, --systemd-units) started before it:
# the share of samples whose stack reaches a root and the median user depth
# (bench/stacks, from the profiles the agent published), next to the
# agent's CPU over the span (its process, plus its BPF programs' run time:
# run_time_ns of the programs it holds, kernel.bpf_stats_enabled on for the
# run), its peak RSS and the kernel bytes of its unwind tables:
#   xz       Debian's xz -9e -T1, in a loop
#   openssl  Debian's openssl speed sha256, in a loop
#   python3  Debian's /usr/bin/python3, a generator summed (native and Python
#            frames)
#   c-O2     a C chain leaf <- b <- a <- main built -O2 -fomit-frame-pointer
#   go       a Go program (frame pointers and .gopclntab)
#   rust     a Rust program built -C opt-level=3
# The agent runs with off-CPU profiling off (STACKSTREAM_AGENT_OFFCPU_PROBABILITY=0).
# UNWIND_WORKLOADS picks them (default all; "none" skips the table),
# UNWIND_HZ the rate (19), UNWIND_WARMUP and UNWIND_SPAN the seconds (5, 30).
# WORKLOADS=none skips the overhead table.
#
# Needs root (eBPF) and a Kafka broker (STACKSTREAM_KAFKA_BROKERS, default
# 127.0.0.1:9092). WARMUP and SPAN (seconds) set each run's length; RATES
# (default "19 99"), WORKLOADS (default "busy churn langs") and TARGETS
# (default "all unit") pick the runs. AGENT=path runs a prebuilt agent.
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
unwind_prefixes=()
BPF_STATS=
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
	for p in "${unwind_prefixes[@]}"; do "$WORK/topics" delete "$p" >/dev/null 2>&1 || true; done
	if [ -n "$BPF_STATS" ]; then sysctl -qw kernel.bpf_stats_enabled="$BPF_STATS" || true; fi
	[ -n "$UNIT_DIR" ] && rmdir "$UNIT_DIR" "$(dirname "$UNIT_DIR")" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# AGENT=path runs that binary instead of building this tree's (an A/B
# against an older commit's build).
if [ -n "${AGENT:-}" ]; then
	cp "$AGENT" "$WORK/stackstream-agent"
else
	(cd "$MODULE" && go build -o "$WORK/stackstream-agent" ./cmd/stackstream-agent)
fi
(cd "$MODULE" && go build -o "$WORK/topics" ./bench/topics && go build -o "$WORK/stacks" ./bench/stacks)

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
# bpf_ns PID: run_time_ns summed over the BPF programs PID holds (once each).
bpf_ns() {
	for f in /proc/"$1"/fdinfo/*; do
		awk '/^prog_id:/ {id = $2} /^run_time_ns:/ {ns = $2} END {if (id != "" && ns != "") print id, ns}' "$f" 2>/dev/null
	done | sort -u -k1,1 | awk '{s += $2} END {print s + 0}'
}
# The BPF programs' run time is counted while kernel.bpf_stats_enabled is 1
# (restored at exit).
BPF_STATS=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1

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
	for targets in ${TARGETS:-all unit}; do
		if [ "$wl" = none ] || { [ "$targets" = unit ] && [ -z "$UNIT_DIR" ]; }; then
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
		t0=$(cpu_ticks "$apid"); b0=$(bpf_ns "$apid"); f0=$(forks); s0=$(date +%s.%N); d0=$(debuginfo_read "$addr")
		sleep "$SPAN"
		t1=$(cpu_ticks "$apid"); b1=$(bpf_ns "$apid"); f1=$(forks); s1=$(date +%s.%N); d1=$(debuginfo_read "$addr")
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
			-v f="$((f1 - f0))" -v hwm="$hwm" -v rss="$rss" -v d="$((d1 - d0))" -v b="$((b1 - b0))" 'BEGIN {
			span = s1 - s0
			printf "%-4s %-6s %-5s %9.2f %9.3f %12.1f %12.1f %10.0f %12d %8.0f\n", hz, wl, tg, 100 * t / tck / span, 100 * b / 1e9 / span, hwm / 1024, rss / 1024, f / span, d, span
		}')")
		echo "done: ${hz} Hz, $wl, $targets" >&2
	done
	done
done

echo "stackstream-agent overhead ($(nproc) CPUs, $(uname -r); shared machine, other work running)"
printf "%-4s %-6s %-5s %9s %9s %12s %12s %10s %12s %8s\n" "Hz" "load" "targets" "CPU%core" "bpf%core" "maxRSS_MiB" "endRSS_MiB" "forks/s" "new_binaries" "span_s"
printf "%s\n" "${results[@]}"

# ---- Unwinding: completeness and cost per workload (issue 12) ----
UW=${UNWIND_WORKLOADS:-xz openssl python3 c-O2 go rust}
[ "$UW" = none ] && exit 0
if [ -z "$UNIT_DIR" ]; then
	echo "agent bench: no writable cgroup root, the unwinding table is left out" >&2
	exit 0
fi
uw_hz=${UNWIND_HZ:-19}
# The C chain and the Rust program are those of the sampler's tests.
cat >"$WORK/chain.c" <<'EOF'
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	return x;
}
__attribute__((noinline, noipa)) unsigned long b(unsigned long n) {
	unsigned long buf[64];
	for (int i = 0; i < 64; i++) buf[i] = leaf(n + i);
	return buf[n % 64] + 1;
}
__attribute__((noinline, noipa)) unsigned long a(unsigned long n) { return b(n) * 3 + 1; }
int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
	for (;;) sink += a(n);
}
EOF
cat >"$WORK/hot.go" <<'EOF'
package main

var sink uint64

//go:noinline
func hotFunction(n uint64) uint64 {
	x := n
	for i := uint64(0); i < n; i++ {
		x = x*6364136223846793005 + i
	}
	return x
}

func main() {
	for {
		sink += hotFunction(100000)
	}
}
EOF
cat >"$WORK/hot.rs" <<'EOF'
#[inline(never)] fn leaf(n: u64) -> u64 { let mut x = n; for i in 0..n { x = x.wrapping_mul(6364136223846793005).wrapping_add(i); } std::hint::black_box(x) }
#[inline(never)] fn middle(n: u64) -> u64 { let v: Vec<u64> = (0..8).map(|i| leaf(std::hint::black_box(n + i))).collect(); v[(n % 8) as usize] + 1 }
fn main() { let mut s = 0u64; loop { s = s.wrapping_add(middle(std::hint::black_box(100000))); if s == 42 { println!("{}", s); } } }
EOF
# uw_cmd NAME: builds what the workload needs and prints its shell command.
uw_cmd() {
	case "$1" in
	xz)
		if [ ! -f "$WORK/xz.in" ]; then
			cat /usr/bin/xz /lib/x86_64-linux-gnu/libc.so.6 /usr/bin/python3 >"$WORK/xz.1"
			for _ in $(seq 16); do cat "$WORK/xz.1"; done | head -c $((64 << 20)) >"$WORK/xz.in"
		fi
		echo "while :; do xz -9e -T1 -c '$WORK/xz.in' >/dev/null; done" ;;
	openssl) echo "while :; do openssl speed -seconds 60 sha256 >/dev/null 2>&1; done" ;;
	python3) echo "exec /usr/bin/python3 -c 'while True: sum(i * i for i in range(1000))'" ;;
	c-O2) gcc -O2 -fomit-frame-pointer -o "$WORK/chain" "$WORK/chain.c" && echo "exec '$WORK/chain' 5000" ;;
	go) (cd "$WORK" && GOWORK=off GOFLAGS= go build -o "$WORK/gohot" hot.go) && echo "exec '$WORK/gohot'" ;;
	rust) command -v rustc >/dev/null && rustc -C opt-level=3 -o "$WORK/rusthot" "$WORK/hot.rs" && echo "exec '$WORK/rusthot'" ;;
	esac
}
metric() { curl -s "http://$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
uw_results=()
# Topics for every workload first: a topic just created may not be in the
# broker's metadata when the agent checks it at start.
for wl in $UW; do
	unwind_prefixes+=("${PREFIX}uw-$wl.")
	"$WORK/topics" create "${PREFIX}uw-$wl."
done
sleep 2
for wl in $UW; do
	cmd=$(uw_cmd "$wl") && [ -n "$cmd" ] || { echo "agent bench: $wl cannot be built, left out" >&2; continue; }
	prefix="${PREFIX}uw-$wl."
	mkdir -p "$UNIT_DIR"
	# Off-CPU profiling off: on-CPU sampling and unwinding only, as the
	# issue's comparison (its sched_switch program would count in bpf%core).
	STACKSTREAM_AGENT_OFFCPU_PROBABILITY=0 STACKSTREAM_KAFKA_TOPIC_PREFIX=$prefix STACKSTREAM_LISTEN_ADDR=127.0.0.1:0 \
		"$WORK/stackstream-agent" --frequency "$uw_hz" --interval 10s \
		--systemd-units "$UNIT" >"$WORK/agent-uw-$wl.log" 2>&1 &
	apid=$!
	sleep 2
	setsid bash -c "echo \$\$ >'$UNIT_DIR/cgroup.procs'; $cmd" </dev/null >/dev/null 2>&1 &
	wpid=$!
	pids_to_stop+=("$wpid")
	sleep "${UNWIND_WARMUP:-5}"
	if ! kill -0 "$apid" 2>/dev/null; then
		echo "agent exited during warm-up:" >&2
		cat "$WORK/agent-uw-$wl.log" >&2
		exit 1
	fi
	addr=$(sed -n 's/.*msg=listening.* addr=\([0-9.:]*\).*/\1/p' "$WORK/agent-uw-$wl.log" | head -1)
	t0=$(cpu_ticks "$apid"); b0=$(bpf_ns "$apid"); s0=$(date +%s.%N)
	sleep "${UNWIND_SPAN:-30}"
	t1=$(cpu_ticks "$apid"); b1=$(bpf_ns "$apid"); s1=$(date +%s.%N)
	hwm=$(status_kb "$apid" VmHWM); tb=$(metric "$addr" stackstream_agent_unwind_table_bytes)
	kill -TERM "$apid"; wait "$apid" || true
	kill -- "-$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
	for p in $(cat "$UNIT_DIR/cgroup.procs" 2>/dev/null); do echo "$p" >"$CGROUP_ROOT/cgroup.procs" 2>/dev/null || true; done
	read -r share depth samples < <("$WORK/stacks" "$prefix")
	if [ "${samples:-0}" = 0 ]; then
		echo "agent bench: no samples of $wl; the agent's log ends:" >&2
		tail -n 5 "$WORK/agent-uw-$wl.log" >&2
	fi
	uw_results+=("$(awk -v wl="$wl" -v t="$((t1 - t0))" -v tck="$(getconf CLK_TCK)" -v b="$((b1 - b0))" -v s0="$s0" -v s1="$s1" \
		-v hwm="$hwm" -v tb="${tb:-0}" -v share="$share" -v depth="$depth" -v n="$samples" 'BEGIN {
		span = s1 - s0
		p = 100 * t / tck / span; k = 100 * b / 1e9 / span
		printf "%-8s %9s %6d %8d %9.2f %8.3f %9.2f %10.1f %10.1f\n", wl, share, depth, n, p, k, p + k, hwm / 1024, tb / 1024
	}')")
	echo "done: unwinding, $wl" >&2
done
echo
echo "stackstream-agent unwinding at $uw_hz Hz, each workload alone in its cgroup ($(nproc) CPUs, $(uname -r); shared machine)"
printf "%-8s %9s %6s %8s %9s %8s %9s %10s %10s\n" "workload" "complete%" "depth" "samples" "proc%core" "bpf%core" "CPU%core" "maxRSS_MiB" "tables_KiB"
printf "%s\n" "${uw_results[@]}"
