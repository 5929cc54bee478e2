package agent

import (
	"fmt"
	"regexp"
	"time"

	"github.com/stackstream/stackstream/services/agent/internal/heap"
	"github.com/stackstream/stackstream/services/agent/internal/k8s"
	"github.com/stackstream/stackstream/services/agent/internal/publish"
)

// Config is read from STACKSTREAM_AGENT_* and overridden by flags.
type Config struct {
	HostID                 string        `envconfig:"HOST_ID" desc:"record key and host of every profile (default: the hostname)"`
	Frequency              int           `envconfig:"FREQUENCY" default:"19" desc:"samples per second per CPU"`
	Interval               time.Duration `envconfig:"INTERVAL" default:"10s" desc:"how often profiles are built and sent"`
	SystemdUnits           []string      `envconfig:"SYSTEMD_UNITS" desc:"profile only these systemd units (comma separated)"`
	PIDs                   []int         `envconfig:"PIDS" desc:"profile only these process IDs"`
	Cgroups                []string      `envconfig:"CGROUPS" desc:"profile only processes under these cgroup paths"`
	Comm                   string        `envconfig:"COMM" desc:"profile only processes whose comm matches this regexp"`
	CountsMapSize          int           `envconfig:"COUNTS_MAP_SIZE" default:"16384" desc:"distinct (pid, stacks) keys per interval"`
	StacksMapSize          int           `envconfig:"STACKS_MAP_SIZE" default:"16384" desc:"distinct stacks per interval"`
	BufferRecords          int           `envconfig:"BUFFER_RECORDS" default:"1000" desc:"records held while Kafka is unreachable; more are dropped and counted"`
	BufferBytes            int           `envconfig:"BUFFER_BYTES" default:"67108864" desc:"bytes held while Kafka is unreachable"`
	Memory                 bool          `envconfig:"MEMORY" default:"true" desc:"publish the memory (RSS) profile every interval"`
	HeapEndpoints          []string      `envconfig:"HEAP_ENDPOINTS" desc:"pprof heap endpoints to scrape, [service=]http://host:port/debug/pprof/heap"`
	HeapMaxCompressedBytes int64         `envconfig:"HEAP_MAX_COMPRESSED_BYTES" default:"4194304" desc:"largest heap scrape response body"`
	HeapMaxBytes           int64         `envconfig:"HEAP_MAX_BYTES" default:"8388608" desc:"largest heap profile once decompressed"`
	HeapMaxEntries         int           `envconfig:"HEAP_MAX_ENTRIES" default:"200000" desc:"most messages (samples, locations, functions, strings, labels, lines) in a heap profile"`
	HeapTimeout            time.Duration `envconfig:"HEAP_TIMEOUT" default:"5s" desc:"time limit of one heap scrape (at most half the interval)"`
	FileTimeout            time.Duration `envconfig:"FILE_TIMEOUT" default:"5s" desc:"longest wait for one read of a process's binary (a hung FUSE or NFS server); its device is then skipped for 10 minutes"`
	DebuginfoHold          time.Duration `envconfig:"DEBUGINFO_HOLD" default:"30s" desc:"longest a profile waits for the debuginfo of a new binary it names to be acknowledged"`
	ProcRoot               string        `envconfig:"PROC_ROOT" default:"/proc" desc:"where the host's /proc is mounted"`
	MemoryLimit            int64         `envconfig:"MEMORY_LIMIT" default:"20971520" desc:"soft limit of the Go heap in bytes (GOMEMLIMIT wins when set); 0 for none"`
	MaxProcs               int           `envconfig:"MAX_PROCS" default:"1" desc:"threads running the agent's Go code at once (GOMAXPROCS wins when set); 0 for one per CPU"`
	UnwindTableBytes       int           `envconfig:"UNWIND_TABLE_BYTES" default:"33554432" desc:"kernel memory reserved for unwind tables (8 bytes a row, allocated at start); 0 walks user stacks with frame pointers only"`
	UnwindMappings         int           `envconfig:"UNWIND_MAPPINGS" default:"131072" desc:"most address-range entries (a few per executable mapping) of the processes registered for table unwinding"`
	UnwindCacheDir         string        `envconfig:"UNWIND_CACHE_DIR" default:"/var/cache/stackstream-agent/unwind" desc:"compiled unwind tables kept on disk by build ID, so a restarted agent does not compile them again; empty for none"`
	UnwindCacheBytes       int64         `envconfig:"UNWIND_CACHE_BYTES" default:"268435456" desc:"most bytes of the unwind table cache; the least recently used tables are removed past it"`
	UnwindProcesses        int           `envconfig:"UNWIND_PROCESSES" default:"8192" desc:"most processes registered for table unwinding"`
	PerfMaps               bool          `envconfig:"PERF_MAPS" default:"true" desc:"name JIT code (anonymous executable memory) from the process's /tmp/perf-PID.map"`
	JavaPerfMap            bool          `envconfig:"JAVA_PERFMAP" default:"true" desc:"ask sampled JVMs to write their perf map (jcmd Compiler.perfmap through the attach mechanism: no JVM flag needed)"`
	Kubernetes             string        `envconfig:"KUBERNETES" default:"auto" desc:"label processes in pods with their pod, namespace, container and workload from the Kubernetes API server: auto (when the agent runs in a pod), on, off"`
	KubernetesAPI          string        `envconfig:"KUBERNETES_API" desc:"the API server's URL (default: the cluster's own, from KUBERNETES_SERVICE_HOST and _PORT)"`
	KubernetesTokenFile    string        `envconfig:"KUBERNETES_TOKEN_FILE" default:"/var/run/secrets/kubernetes.io/serviceaccount/token" desc:"bearer token (re-read at every request); needs get, list and watch on pods"`
	KubernetesCAFile       string        `envconfig:"KUBERNETES_CA_FILE" default:"/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" desc:"the API server's CA certificate"`
	NodeName               string        `envconfig:"NODE_NAME" desc:"this node's name in Kubernetes, whose pods are watched (default: STACKSTREAM_AGENT_HOST_ID)"`
	JavaPerfMapInterval    time.Duration `envconfig:"JAVA_PERFMAP_INTERVAL" default:"60s" desc:"how often a sampled JVM is asked again (newly compiled methods); failures back off up to 1h"`
	OffCPUProbability      float64       `envconfig:"OFFCPU_PROBABILITY" default:"0.01" desc:"off-CPU profile: share of thread switch-outs recorded with their stacks (blocked time is scaled up by its inverse); 0 turns the offcpu profile off"`
	OffCPUMinBlock         time.Duration `envconfig:"OFFCPU_MIN_BLOCK" default:"0s" desc:"off-CPU profile: blocks shorter than this are left out"`
	OffCPUThreads          int           `envconfig:"OFFCPU_THREADS" default:"16384" desc:"off-CPU profile: recorded threads blocked at once (a BPF map); more are not recorded, and counted"`
}

// heapLimits are the scrape limits; a scrape gets at most half the interval,
// so slow endpoints cannot make the ticks fall behind.
func (c Config) heapLimits() heap.Limits {
	timeout := min(c.HeapTimeout, c.Interval/2)
	return heap.Limits{MaxCompressedBytes: c.HeapMaxCompressedBytes, MaxBytes: c.HeapMaxBytes, MaxEntries: c.HeapMaxEntries, Timeout: timeout}
}

// Hold is how profiles wait for their debuginfo.
func (c Config) Hold() publish.HoldConfig {
	return publish.HoldConfig{Max: c.DebuginfoHold, Records: publish.DefaultHold.Records}
}

// kubernetes returns where pod metadata comes from, or false when it is off
// (STACKSTREAM_AGENT_KUBERNETES=auto outside a pod).
func (c Config) kubernetes() (k8s.Config, bool, error) {
	// "" (a Config not read from the environment) is the default, auto.
	if c.Kubernetes == "off" {
		return k8s.Config{}, false, nil
	}
	server := c.KubernetesAPI
	if server == "" {
		server = k8s.ClusterServer()
	}
	if server == "" {
		if c.Kubernetes == "on" {
			return k8s.Config{}, false, fmt.Errorf("STACKSTREAM_AGENT_KUBERNETES=on: no API server (set STACKSTREAM_AGENT_KUBERNETES_API, or run in a pod)")
		}
		return k8s.Config{}, false, nil
	}
	node := c.NodeName
	if node == "" {
		node = c.HostID
	}
	return k8s.Config{Server: server, TokenFile: c.KubernetesTokenFile, CAFile: c.KubernetesCAFile, NodeName: node, MaxPods: k8s.DefaultMaxPods}, true, nil
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	switch {
	case c.Frequency < 1 || c.Frequency > 1000:
		return fmt.Errorf("STACKSTREAM_AGENT_FREQUENCY=%d: use 1..1000 samples per second", c.Frequency)
	case c.Interval < time.Second:
		return fmt.Errorf("STACKSTREAM_AGENT_INTERVAL=%s: use at least 1s", c.Interval)
	case c.CountsMapSize < 64 || c.StacksMapSize < 64:
		return fmt.Errorf("STACKSTREAM_AGENT_COUNTS_MAP_SIZE=%d, STACKSTREAM_AGENT_STACKS_MAP_SIZE=%d: use at least 64", c.CountsMapSize, c.StacksMapSize)
	case c.BufferRecords < 1:
		return fmt.Errorf("STACKSTREAM_AGENT_BUFFER_RECORDS=%d: use at least 1", c.BufferRecords)
	case c.BufferBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_AGENT_BUFFER_BYTES=%d: use at least 1048576", c.BufferBytes)
	case c.HeapMaxCompressedBytes < 1024:
		return fmt.Errorf("STACKSTREAM_AGENT_HEAP_MAX_COMPRESSED_BYTES=%d: use at least 1024", c.HeapMaxCompressedBytes)
	case c.HeapMaxBytes < 1024:
		return fmt.Errorf("STACKSTREAM_AGENT_HEAP_MAX_BYTES=%d: use at least 1024", c.HeapMaxBytes)
	case c.HeapMaxEntries < 16:
		return fmt.Errorf("STACKSTREAM_AGENT_HEAP_MAX_ENTRIES=%d: use at least 16", c.HeapMaxEntries)
	case c.HeapTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_AGENT_HEAP_TIMEOUT=%s: use a positive duration", c.HeapTimeout)
	case c.FileTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_AGENT_FILE_TIMEOUT=%s: use a positive duration", c.FileTimeout)
	case c.DebuginfoHold <= 0:
		return fmt.Errorf("STACKSTREAM_AGENT_DEBUGINFO_HOLD=%s: use a positive duration", c.DebuginfoHold)
	case c.UnwindTableBytes < 0 || c.UnwindTableBytes > 1<<30:
		return fmt.Errorf("STACKSTREAM_AGENT_UNWIND_TABLE_BYTES=%d: use 0 (frame pointers only) up to 1073741824", c.UnwindTableBytes)
	case c.UnwindTableBytes > 0 && (c.UnwindMappings < 64 || c.UnwindProcesses < 1):
		return fmt.Errorf("STACKSTREAM_AGENT_UNWIND_MAPPINGS=%d, STACKSTREAM_AGENT_UNWIND_PROCESSES=%d: use at least 64 and 1", c.UnwindMappings, c.UnwindProcesses)
	case c.UnwindCacheDir != "" && c.UnwindCacheBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_AGENT_UNWIND_CACHE_BYTES=%d: use at least 1048576, or an empty STACKSTREAM_AGENT_UNWIND_CACHE_DIR for no cache", c.UnwindCacheBytes)
	case c.PerfMaps && c.JavaPerfMap && c.JavaPerfMapInterval < time.Second:
		return fmt.Errorf("STACKSTREAM_AGENT_JAVA_PERFMAP_INTERVAL=%s: use at least 1s, or STACKSTREAM_AGENT_JAVA_PERFMAP=false", c.JavaPerfMapInterval)
	case c.Kubernetes != "" && c.Kubernetes != "auto" && c.Kubernetes != "on" && c.Kubernetes != "off":
		return fmt.Errorf("STACKSTREAM_AGENT_KUBERNETES=%q: use auto, on or off", c.Kubernetes)
	case c.OffCPUProbability < 0 || c.OffCPUProbability > 1 || c.OffCPUProbability != c.OffCPUProbability:
		return fmt.Errorf("STACKSTREAM_AGENT_OFFCPU_PROBABILITY=%v: use 0 (off) up to 1", c.OffCPUProbability)
	case c.OffCPUProbability > 0 && c.OffCPUProbability < 1e-6:
		return fmt.Errorf("STACKSTREAM_AGENT_OFFCPU_PROBABILITY=%v: use at least 0.000001, or 0 to turn off-CPU profiling off", c.OffCPUProbability)
	case c.OffCPUMinBlock < 0:
		return fmt.Errorf("STACKSTREAM_AGENT_OFFCPU_MIN_BLOCK=%s: use 0 or a positive duration", c.OffCPUMinBlock)
	case c.OffCPUProbability > 0 && (c.OffCPUThreads < 64 || c.OffCPUThreads > 1<<22):
		return fmt.Errorf("STACKSTREAM_AGENT_OFFCPU_THREADS=%d: use 64..4194304", c.OffCPUThreads)
	case c.Comm != "" && !validRegexp(c.Comm):
		_, err := regexp.Compile(c.Comm)
		return fmt.Errorf("STACKSTREAM_AGENT_COMM=%q: %v", c.Comm, err)
	case c.MemoryLimit < 0:
		return fmt.Errorf("STACKSTREAM_AGENT_MEMORY_LIMIT=%d: use 0 (none) or a number of bytes", c.MemoryLimit)
	case c.MaxProcs < 0:
		return fmt.Errorf("STACKSTREAM_AGENT_MAX_PROCS=%d: use 0 (one per CPU) or a number of threads", c.MaxProcs)
	}
	return nil
}

func validRegexp(s string) bool {
	_, err := regexp.Compile(s)
	return err == nil
}
