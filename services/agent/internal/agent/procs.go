package agent

import (
	"debug/elf"
	"sort"
	"strconv"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// process is what the agent remembers about a live process between intervals.
type process struct {
	info     proc.Info
	labels   map[string]string
	targeted bool
	maps     []mapping // sorted by Start; read lazily
	mapsRead uint64    // interval+1 of the last read, 0 before
	seen     uint64    // interval number it was last seen in
	checked  uint64    // interval number its PID was last checked by refresh
}

// mapping is an executable mapping with its file's identity.
type mapping struct {
	proc.Mapping
	file *binary // nil for anonymous and special mappings
}

// binary is one executable file, shared by every process mapping it.
type binary struct {
	path    string // as seen by the first process mapping it
	openAs  string // through /proc/PID/root, to reach containers' files
	buildID string
	err     error // why there is no build ID
}

type fileKey struct {
	dev   string
	inode uint64
}

// processes caches process identities and mappings, and binaries by
// device+inode, so a busy host costs /proc reads only for new processes.
type processes struct {
	fs       proc.FS
	targets  *proc.Targets
	procs    map[int]*process
	binaries map[fileKey]*binary
	interval uint64
}

func newProcesses(fs proc.FS, t *proc.Targets) *processes {
	return &processes{fs: fs, targets: t, procs: map[int]*process{}, binaries: map[fileKey]*binary{}}
}

// get returns the cached process pid, reading it on first sight. A process
// that exited before it could be read is described by its comm alone.
func (ps *processes) get(pid int, comm string) *process {
	if p, ok := ps.procs[pid]; ok {
		p.seen = ps.interval
		return p
	}
	if ps.targets.ExcludedByPID(pid) {
		// Not read at all: with --pids alone, other processes cost a map entry.
		p := &process{info: proc.Info{PID: pid, Comm: comm}, seen: ps.interval}
		ps.procs[pid] = p
		return p
	}
	// The sample's comm is the thread's name; labels use the process's.
	info, err := ps.fs.ReadInfo(pid)
	if err != nil {
		info = proc.Info{PID: pid, Comm: comm}
	}
	p := &process{info: info, seen: ps.interval}
	p.targeted = ps.targets.Match(info)
	p.labels = labelsOf(info)
	ps.procs[pid] = p
	return p
}

// labelsOf returns the sample labels of a process (DESIGN.md).
func labelsOf(info proc.Info) map[string]string {
	l := map[string]string{
		record.LabelPID:  strconv.Itoa(info.PID),
		record.LabelComm: info.Comm,
	}
	set := func(k, v string) {
		if v != "" {
			l[k] = v
		}
	}
	set(record.LabelExecutable, info.Executable)
	set(record.LabelSystemdUnit, info.Cgroup.SystemdUnit)
	set(record.LabelContainerID, info.Cgroup.ContainerID)
	set(record.LabelK8sPod, info.K8sPod)
	set(record.LabelK8sNamespace, info.K8sNS)
	l[record.LabelService] = record.DeriveService(l)
	return l
}

// mappingOf returns the mapping of p containing addr, reading /proc/PID/maps
// on first need and again when addr is outside every known mapping (a library
// loaded since).
func (ps *processes) mappingOf(p *process, addr uint64) *mapping {
	if m := find(p.maps, addr); m != nil || p.mapsRead == ps.interval+1 || p.info.StartTime == 0 {
		return m
	}
	ps.readMaps(p)
	return find(p.maps, addr)
}

func find(maps []mapping, addr uint64) *mapping {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].Limit > addr })
	if i < len(maps) && maps[i].Start <= addr {
		return &maps[i]
	}
	return nil
}

func (ps *processes) readMaps(p *process) {
	p.mapsRead = ps.interval + 1
	raw, err := ps.fs.ReadMaps(p.info.PID)
	if err != nil {
		return
	}
	maps := make([]mapping, 0, len(raw))
	for _, m := range raw {
		mm := mapping{Mapping: m}
		if m.Inode != 0 && m.Path != "" && m.Path[0] == '/' {
			mm.file = ps.binary(p.info.PID, m)
		}
		maps = append(maps, mm)
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	p.maps = maps
}

func (ps *processes) binary(pid int, m proc.Mapping) *binary {
	k := fileKey{m.Dev, m.Inode}
	if b, ok := ps.binaries[k]; ok {
		// Through the newest process mapping it: the first may be gone.
		b.openAs = ps.fs.OpenPath(pid, m)
		return b
	}
	b := &binary{path: m.Path, openAs: ps.fs.OpenPath(pid, m)}
	f, err := elf.Open(b.openAs)
	if err == nil {
		b.buildID, b.err = elfinfo.BuildID(f)
		f.Close()
	} else {
		b.err = err
	}
	ps.binaries[k] = b
	return b
}

// sweep forgets processes not seen for keep intervals, and those whose PID
// now belongs to a new process. Processes refresh already checked this
// interval cost no read.
func (ps *processes) sweep(keep uint64) {
	for pid, p := range ps.procs {
		if ps.interval-p.seen > keep {
			delete(ps.procs, pid)
			continue
		}
		if p.checked == ps.interval {
			continue
		}
		// An exited process stays until unseen: its last samples may come
		// in the next drain.
		if st, err := ps.fs.ReadStat(pid); err == nil && st.StartTime != p.info.StartTime {
			delete(ps.procs, pid)
		}
	}
}

// refresh reads the stat of a live process: its RSS, and whether the cached
// entry for its PID is still the same process.
func (ps *processes) refresh(pid int) (p *process, rssPages int64, err error) {
	st, err := ps.fs.ReadStat(pid)
	if err != nil {
		return nil, 0, err
	}
	if p, ok := ps.procs[pid]; ok && p.info.StartTime != st.StartTime {
		delete(ps.procs, pid)
	}
	p = ps.get(pid, st.Comm)
	p.checked = ps.interval
	return p, st.RSSPages, nil
}
