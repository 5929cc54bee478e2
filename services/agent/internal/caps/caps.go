// Package caps checks that the agent holds the capabilities eBPF profiling
// needs, so a missing one is one clear line instead of an EPERM deep inside
// program loading.
package caps

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability numbers from linux/capability.h.
const (
	capSysAdmin = 21 // #define CAP_SYS_ADMIN 21
	capPerfmon  = 38 // #define CAP_PERFMON 38
	capBPF      = 39 // #define CAP_BPF 39
)

// Check reads the effective capabilities of this process from
// /proc/self/status.
func Check() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	eff, err := Effective(b)
	if err != nil {
		return err
	}
	return Missing(eff)
}

// Effective parses the CapEff line of /proc/PID/status.
func Effective(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parse CapEff %q: %w", v, err)
			}
			return eff, nil
		}
	}
	return 0, fmt.Errorf("parse capabilities: no CapEff line in /proc/self/status")
}

// Missing returns nil when eff allows loading BPF programs and opening perf
// events on every CPU (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN on older
// kernels), else an error naming what is missing and how to run the agent.
func Missing(eff uint64) error {
	has := func(c int) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return fmt.Errorf("missing capability %s: run as root, or grant them with `setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_syslog+ep stackstream-agent` (in Kubernetes: securityContext.capabilities.add: [BPF, PERFMON, SYS_PTRACE, SYSLOG])",
		strings.Join(missing, "+"))
}
