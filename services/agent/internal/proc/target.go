package proc

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Targets says which processes to profile. With no criteria every process is
// targeted; otherwise a process is targeted when it matches any criterion.
type Targets struct {
	PIDs         map[int]bool
	SystemdUnits map[string]bool
	Cgroups      []string // cgroup path prefixes, e.g. /system.slice/opensearch.service
	Comm         *regexp.Regexp
	ExcludePID   int // the agent itself
}

// NewTargets builds Targets from the flag values.
func NewTargets(pids []int, units, cgroups []string, comm string, self int) (*Targets, error) {
	t := &Targets{PIDs: map[int]bool{}, SystemdUnits: map[string]bool{}, ExcludePID: self}
	for _, p := range pids {
		t.PIDs[p] = true
	}
	for _, u := range units {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !isUnit(u) {
			// parca-agent accepts bare names; so do we.
			u += ".service"
		}
		t.SystemdUnits[u] = true
	}
	for _, c := range cgroups {
		if c = strings.TrimSpace(c); c != "" {
			t.Cgroups = append(t.Cgroups, path.Clean("/"+c))
		}
	}
	if comm != "" {
		re, err := regexp.Compile(comm)
		if err != nil {
			return nil, fmt.Errorf("comm regexp %q: %w", comm, err)
		}
		t.Comm = re
	}
	return t, nil
}

// All reports whether every process is targeted.
func (t *Targets) All() bool {
	return len(t.PIDs) == 0 && len(t.SystemdUnits) == 0 && len(t.Cgroups) == 0 && t.Comm == nil
}

// ByCgroupOnly reports whether a process is targeted depends on its
// cgroup alone (--systemd-units, --cgroups and nothing else), which its
// children inherit and an exec keeps.
func (t *Targets) ByCgroupOnly() bool {
	return len(t.PIDs) == 0 && t.Comm == nil && (len(t.SystemdUnits) > 0 || len(t.Cgroups) > 0)
}

// ExcludedByPID reports whether pid is surely not targeted, before anything
// about the process is read: it is the agent itself, or --pids is the only
// criterion and does not name it.
func (t *Targets) ExcludedByPID(pid int) bool {
	if pid == t.ExcludePID {
		return true
	}
	onlyPIDs := len(t.PIDs) > 0 && len(t.SystemdUnits) == 0 && len(t.Cgroups) == 0 && t.Comm == nil
	return onlyPIDs && !t.PIDs[pid]
}

// Match reports whether the process is targeted.
func (t *Targets) Match(info Info) bool {
	if info.PID == t.ExcludePID {
		return false
	}
	if t.All() || t.PIDs[info.PID] {
		return true
	}
	if t.Comm != nil && t.Comm.MatchString(info.Comm) {
		return true
	}
	if t.SystemdUnits[info.Cgroup.SystemdUnit] {
		return true
	}
	if len(t.SystemdUnits) > 0 {
		// A process in a child cgroup of a unit belongs to that unit too.
		for _, seg := range strings.Split(info.Cgroup.Path, "/") {
			if t.SystemdUnits[seg] {
				return true
			}
		}
	}
	for _, c := range t.Cgroups {
		if info.Cgroup.Path == c || strings.HasPrefix(info.Cgroup.Path, c+"/") {
			return true
		}
	}
	return false
}
