package proc

import (
	"regexp"
	"strings"
)

// Cgroup is what a process's cgroup path says about where it runs.
type Cgroup struct {
	Path        string // the systemd (or unified) hierarchy path
	SystemdUnit string // innermost .service/.scope unit, if any
	ContainerID string // 64-hex container ID, if any
	K8sPodUID   string // from kubepods paths
	K8sQOSClass string
}

var (
	containerIDRe = regexp.MustCompile(`(?:^|[-/:])([0-9a-f]{64})(?:\.scope)?$`)
	podUIDRe      = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
)

// ParseCgroup reads the content of /proc/PID/cgroup. It prefers the
// name=systemd hierarchy (cgroup v1) or the unified hierarchy (v2), which is
// where systemd places units and container runtimes place containers.
func ParseCgroup(content string) Cgroup {
	var unified, systemd, any string
	for _, line := range strings.Split(content, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			unified = parts[2]
		case parts[1] == "name=systemd":
			systemd = parts[2]
		case any == "" || len(parts[2]) > len(any):
			any = parts[2]
		}
	}
	var path string
	for _, c := range []string{systemd, unified, any} {
		if c != "" && c != "/" {
			path = c
			break
		}
		if path == "" {
			path = c
		}
	}
	cg := Cgroup{Path: path}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if cg.ContainerID == "" {
			if m := containerIDRe.FindStringSubmatch(s); m != nil {
				cg.ContainerID = m[1]
				continue
			}
		}
		if cg.SystemdUnit == "" && isUnit(s) && !strings.HasSuffix(s, ".slice") {
			// A container's scope (docker-<id>.scope) is not the unit users name.
			if cg.ContainerID == "" || !strings.Contains(s, cg.ContainerID) {
				cg.SystemdUnit = s
			}
		}
	}
	if m := podUIDRe.FindStringSubmatch(path); m != nil {
		cg.K8sPodUID = strings.ReplaceAll(m[1], "_", "-")
		for _, q := range []string{"besteffort", "burstable"} {
			if strings.Contains(path, q) {
				cg.K8sQOSClass = q
			}
		}
		// Inside a pod the unit (cri-containerd-<id>.scope) is not a service.
		cg.SystemdUnit = ""
	}
	return cg
}

func isUnit(s string) bool {
	for _, suf := range []string{".service", ".scope", ".slice", ".socket", ".mount"} {
		if strings.HasSuffix(s, suf) {
			return true
		}
	}
	return false
}
