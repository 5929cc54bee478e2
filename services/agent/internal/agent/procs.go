package agent

import (
	"errors"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/k8s"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/python"
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

// process is what the agent remembers about a live process between intervals.
type process struct {
	info     proc.Info
	labels   map[string]string
	targeted bool
	maps     []mapping // sorted by Start; read lazily
	mapsRead uint64    // interval+1 of the last read, 0 before
	seen     uint64    // interval number it was last seen in
	podTries int       // intervals its pod was looked up in vain (in a pod's cgroup)
	checked  uint64    // interval number its PID was last checked by refresh
}

// mapping is an executable mapping with its file's identity.
type mapping struct {
	proc.Mapping
	file    *binary // nil for anonymous and special mappings
	checked uint64  // interval+1 when file was last checked against the file system
}

// binary is one executable file's content, shared by every process mapping it.
type binary struct {
	id      proc.FileID // device, inode, size, mtime, ctime when its build ID was read
	path    string      // as seen by the first process mapping it
	buildID string
	err     error // why there is no build ID
	// The newest process mapping it, through which its symbols are read:
	// the first may be gone.
	pid     int
	mapping proc.Mapping
	used    uint64 // interval it was last looked up in
	checked uint64 // interval+1 when its FileID was last confirmed
}

type fileKey struct {
	dev   string
	inode uint64
}

// maxBinaries bounds the binary cache: a host runs a few hundred distinct
// executables and libraries; more are evicted, least recently used first.
const maxBinaries = 4096

// processes caches process identities and mappings, and binaries by
// device+inode (checked against size, mtime and ctime on every lookup), so a
// busy host costs /proc reads only for new processes.
type processes struct {
	fs       proc.FS
	targets  *proc.Targets
	procs    map[int]*process
	binaries map[fileKey]*binary
	interval uint64
	files    *fileGate
	mapFiles bool              // open mapped files through /proc/PID/map_files first
	jit      *jitFrames        // names JIT code from perf maps; nil: off
	python   *python.Resolver  // names Python frames; nil without table unwinding
	js       *v8.Resolver      // names JavaScript frames; nil without table unwinding
	java     *hotspot.Resolver // names Java frames; nil without table unwinding
	pods     podSource         // pod metadata from the API server; nil: off
}

// podSource names the pod and container of a process from the pod UID and
// container ID of its cgroup (k8s.Cache).
type podSource interface {
	Lookup(podUID, containerID string) (k8s.Meta, bool)
}

// maxPodTries is how many intervals a process in a pod's cgroup is looked up
// again while the API server has not shown its pod yet (a pod starts before
// its watch event arrives).
const maxPodTries = 6

func newProcesses(fs proc.FS, t *proc.Targets, files *fileGate) *processes {
	return &processes{fs: fs, targets: t, procs: map[int]*process{}, binaries: map[fileKey]*binary{}, files: files, mapFiles: true}
}

// get returns the cached process pid, reading it on first sight. A process
// that exited before it could be read is described by its comm alone.
func (ps *processes) get(pid int, comm string) *process {
	if p, ok := ps.procs[pid]; ok {
		if p.podTries > 0 && p.podTries < maxPodTries && p.seen != ps.interval {
			ps.labelPod(p)
		}
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
	// Reading environ waits for the process's mmap lock, which a process
	// stuck in a page fault on a FUSE file holds: off the tick, bounded.
	type result struct {
		info proc.Info
		err  error
	}
	fs := ps.fs
	r, err := gated(ps.files, procKey(pid), func() result {
		info, err := fs.ReadInfo(pid)
		return result{info, err}
	})
	if err == nil {
		err = r.err
	}
	info := r.info
	if err != nil {
		info = proc.Info{PID: pid, Comm: comm}
	}
	p := &process{info: info, seen: ps.interval}
	p.targeted = ps.targets.Match(info)
	p.labels = labelsOf(info)
	ps.labelPod(p)
	ps.procs[pid] = p
	return p
}

// labelPod sets the Kubernetes labels of a process in a pod from the API
// server's metadata (they win over what the process's environment said),
// and its service from them.
func (ps *processes) labelPod(p *process) {
	uid := p.info.Cgroup.K8sPodUID
	if ps.pods == nil || uid == "" {
		return
	}
	m, ok := ps.pods.Lookup(uid, p.info.Cgroup.ContainerID)
	if !ok {
		p.podTries++
		return
	}
	p.podTries = 0
	l := maps.Clone(p.labels) // profiles of earlier intervals may hold the old map
	for k, v := range map[string]string{record.LabelK8sPod: m.Pod, record.LabelK8sNamespace: m.Namespace, record.LabelK8sContainer: m.Container, record.LabelK8sWorkload: m.Workload} {
		if v != "" {
			l[k] = record.TruncateUTF8(v, record.MaxLabelValueBytes)
		}
	}
	delete(l, record.LabelService)
	l[record.LabelService] = record.TruncateUTF8(record.DeriveService(l), record.MaxServiceBytes)
	p.labels = l
}

// procKey is the file gate's key for the /proc files of pid: a process whose
// files block is skipped like a device that does.
func procKey(pid int) string { return "pid:" + strconv.Itoa(pid) }

// labelsOf returns the sample labels of a process (DESIGN.md). Their values
// come from the process (its comm, executable path, cgroup path, environment):
// they are made valid UTF-8 and cut to record.MaxLabelValueBytes, the
// service to record.MaxServiceBytes.
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
	// From the whole values: the executable's base name is at its end.
	service := record.TruncateUTF8(strings.ToValidUTF8(record.DeriveService(l), "\uFFFD"), record.MaxServiceBytes)
	for k, v := range l {
		l[k] = record.TruncateUTF8(strings.ToValidUTF8(v, "\uFFFD"), record.MaxLabelValueBytes)
	}
	l[record.LabelService] = service
	return l
}

// mappingOf returns the mapping of p containing addr, reading /proc/PID/maps
// on first need and again when addr is outside every known mapping (a library
// loaded since).
func (ps *processes) mappingOf(p *process, addr uint64) *mapping {
	if m := find(p.maps, addr); m != nil || p.mapsRead == ps.interval+1 || p.info.StartTime == 0 {
		if m != nil {
			ps.recheck(p, m)
		}
		return m
	}
	ps.readMaps(p)
	return find(p.maps, addr)
}

// recheck confirms, once per interval, that the binary of a mapping read in
// an earlier interval is still the file's content: a file rewritten in place
// gets its new build ID. When the check fails (the process is gone), the
// binary stays what it was.
func (ps *processes) recheck(p *process, m *mapping) {
	if m.file == nil || m.file.buildID == "" || m.checked == ps.interval+1 {
		return
	}
	m.checked = ps.interval + 1
	// Checked through this process even when another one confirmed the file
	// this interval: the binary must be what this process maps.
	if b := ps.check(p.info.PID, m.Mapping); b.id != (proc.FileID{}) {
		m.file = b
	}
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
	// maps, like environ, waits for the process's mmap lock.
	type result struct {
		maps []proc.Mapping
		err  error
	}
	fs, pid := ps.fs, p.info.PID
	r, err := gated(ps.files, procKey(pid), func() result {
		maps, err := fs.ReadMaps(pid)
		return result{maps, err}
	})
	if err == nil {
		err = r.err
	}
	raw := r.maps
	if err != nil && !errors.Is(err, proc.ErrTooLarge) {
		return
	}
	// Past a bound, the mappings read until then: the lowest addresses,
	// where the executable itself usually is.
	maps := make([]mapping, 0, len(raw))
	for _, m := range raw {
		mm := mapping{Mapping: m, checked: ps.interval + 1}
		if m.Inode != 0 && m.Path != "" && m.Path[0] == '/' {
			mm.file = ps.binary(p.info.PID, m)
		}
		maps = append(maps, mm)
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].Start < maps[j].Start })
	p.maps = maps
}

// binary returns the file of mapping m of pid. The cached entry for its
// device and inode is served only while the file still has the size, mtime
// and ctime it had when its build ID was read: an inode number reused by a
// new file, or a file rewritten in place, is read again. A file that cannot
// be checked (gone, replaced, not regular, blocked) gets no build ID and is
// not cached.
func (ps *processes) binary(pid int, m proc.Mapping) *binary {
	k := fileKey{m.Dev, m.Inode}
	cached := ps.binaries[k]
	if cached != nil && cached.checked == ps.interval+1 {
		// Confirmed this interval: the processes of a build (a compiler run
		// many times) cost one check per binary and interval, not one each.
		// Its pid stays the one that confirmed it, alive this interval.
		cached.used = ps.interval
		return cached
	}
	return ps.check(pid, m)
}

// check confirms the file of mapping m of pid against the cache, reading
// its build ID when it is not the cached content.
func (ps *processes) check(pid int, m proc.Mapping) *binary {
	k := fileKey{m.Dev, m.Inode}
	cached := ps.binaries[k]
	var cachedID *proc.FileID
	if cached != nil {
		id := cached.id
		cachedID = &id
	}
	fs, mapFiles := ps.fs, ps.mapFiles
	in, err := gated(ps.files, m.Dev, func() inspection { return identify(fs, pid, m, mapFiles, cachedID) })
	if err != nil {
		in = inspection{err: err}
	}
	if in.err != nil && !in.read {
		return &binary{path: m.Path, err: in.err}
	}
	if !in.read {
		cached.pid, cached.mapping, cached.used, cached.checked = pid, m, ps.interval, ps.interval+1
		return cached
	}
	b := &binary{id: in.id, path: m.Path, buildID: in.buildID, err: in.err, pid: pid, mapping: m, used: ps.interval, checked: ps.interval + 1}
	if cached == nil && len(ps.binaries) >= maxBinaries {
		ps.evictBinaries()
	}
	ps.binaries[k] = b
	return b
}

// evictBinaries forgets the least recently used quarter of the cache.
// Processes still mapping an evicted binary keep their pointer to it.
func (ps *processes) evictBinaries() {
	used := make([]uint64, 0, len(ps.binaries))
	for _, b := range ps.binaries {
		used = append(used, b.used)
	}
	sort.Slice(used, func(i, j int) bool { return used[i] < used[j] })
	cut := used[len(used)/4]
	for k, b := range ps.binaries {
		if b.used <= cut {
			delete(ps.binaries, k)
		}
	}
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
