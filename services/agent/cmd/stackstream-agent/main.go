// Command stackstream-agent samples every CPU's stacks with eBPF and
// publishes pprof profiles (CPU, memory, heap) and debuginfo to Kafka.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/pkg/version"
	"github.com/stackstream/stackstream/services/agent/internal/agent"
	"github.com/stackstream/stackstream/services/agent/internal/caps"
	"github.com/stackstream/stackstream/services/agent/internal/publish"
)

// cfg is every setting, from STACKSTREAM_* variables and the flags that
// override them: the agent's own, then the blocks every service shares.
type cfg struct {
	Agent      agent.Config `envconfig:"AGENT"`
	ListenAddr string       `envconfig:"LISTEN_ADDR" default:"127.0.0.1:9101" desc:"/metrics, /healthz, /readyz"`
	kafka.Connection
	service.Base
}

func (c *cfg) Validate() error {
	return config.ValidateAll(c.Agent, c.Connection, c.Base)
}

// loadConfig reads the environment, then the flags over it, and validates
// the result once: a bad variable that a valid flag replaces does not stop
// start-up.
func loadConfig(args []string, stdout io.Writer) (*cfg, error) {
	var c cfg
	if err := config.LoadWithFlags(&c, args, stdout, func() *flag.FlagSet { return flags(&c.Agent) }); err != nil {
		return nil, err
	}
	return &c, nil
}

func main() {
	config.Exit("stackstream-agent", runAgent(os.Args[1:], os.Stdout, os.Stderr))
}

func runAgent(args []string, stdout, stderr io.Writer) error {
	c, err := loadConfig(args, stdout)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(c.Log, stderr, "agent")
	if err != nil {
		return err
	}
	if err := caps.Check(); err != nil {
		return err
	}
	// The heap peaks while the symbols of a large new binary are read and
	// encoded; a soft limit makes the collector run sooner there instead of
	// letting the heap double (measured: start-up peak 42-46 MiB RSS without,
	// 39 MiB with 20 MiB). Outside those moments the live heap is far below it.
	if os.Getenv("GOMEMLIMIT") == "" && c.Agent.MemoryLimit > 0 {
		debug.SetMemoryLimit(c.Agent.MemoryLimit)
	}
	setMaxProcs(c.Agent.MaxProcs)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topics := c.Kafka.Topics()
	connOpts, err := c.Kafka.Opts()
	if err != nil {
		return err
	}
	startCtx, startCancel := context.WithTimeout(ctx, c.Kafka.DialTimeout+time.Minute)
	defer startCancel()
	cl, err := kafka.NewClient(startCtx, c.Kafka, append(publish.Opts(publish.Config{BufferRecords: c.Agent.BufferRecords, BufferBytes: c.Agent.BufferBytes}, topics.Debuginfo), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	known, err := publish.KnownBuildIDs(startCtx, connOpts, topics.Debuginfo)
	if err != nil {
		return err
	}
	log.Info("debuginfo already published", "topic", topics.Debuginfo, "build_ids", len(known))

	reg := telemetry.NewRegistry()
	pub := publish.New(cl, log, publish.NewMetrics(reg), c.Agent.Hold())
	a, err := agent.New(c.Agent, agent.Deps{
		Log: log, Registry: reg, Publisher: pub, Topics: topics, KnownBuildIDs: known, Version: version.Version,
	})
	if err != nil {
		return err
	}
	defer a.Close()
	mux := telemetry.Mux(reg, nil)
	// The agent's own profiles, to see what it costs (loopback by default).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	srv, err := telemetry.Listen(c.ListenAddr, mux)
	if err != nil {
		return err
	}

	g := service.NewGroup(log)
	// The agent stops first and publishes its last interval; the flush then
	// gives the buffer a bounded time to reach the brokers before exit.
	agentCtx, stopAgent := context.WithCancel(ctx)
	g.Add(func() error {
		err := a.Run(agentCtx)
		flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ferr := pub.Flush(flushCtx); ferr != nil {
			log.Warn("records left unsent at exit", "buffered", pub.Buffered(), "err", ferr)
		}
		return err
	}, func(error) { stopAgent() })
	g.Add(srv.Run, srv.Stop)
	log.Info("listening", "addr", srv.Addr())
	return g.Run()
}

// setMaxProcs caps the threads running Go code (GOMAXPROCS wins when set).
// The agent's work is serial: a tick, a poll, reads handed to a goroutine
// and waited for. With a second P idle, every such hand-off woke another
// thread that spun looking for work and slept again, and the collector ran
// idle mark workers there: under process churn that was most of the
// agent's CPU (docs/AGENT.md, "Churn CPU: one P"). A blocked read still
// leaves the tick running: a goroutine in a system call gives its P up.
func setMaxProcs(n int) {
	if os.Getenv("GOMAXPROCS") == "" && n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// flags binds the command-line flags to a's fields; their defaults are the
// values already loaded from the environment.
func flags(a *agent.Config) *flag.FlagSet {
	fs := flag.NewFlagSet("stackstream-agent", flag.ContinueOnError)
	fs.StringVar(&a.HostID, "host-id", a.HostID, "record key and host label (STACKSTREAM_AGENT_HOST_ID)")
	fs.IntVar(&a.Frequency, "frequency", a.Frequency, "samples per second per CPU (STACKSTREAM_AGENT_FREQUENCY)")
	fs.DurationVar(&a.Interval, "interval", a.Interval, "profile interval (STACKSTREAM_AGENT_INTERVAL)")
	fs.Func("systemd-units", "comma-separated systemd units to profile (STACKSTREAM_AGENT_SYSTEMD_UNITS)", list(&a.SystemdUnits))
	fs.Func("pids", "comma-separated process IDs to profile (STACKSTREAM_AGENT_PIDS)", func(s string) error {
		a.PIDs = nil
		for _, f := range splitList(s) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				return fmt.Errorf("--pids: %q is not a process ID", f)
			}
			a.PIDs = append(a.PIDs, pid)
		}
		return nil
	})
	fs.Func("cgroups", "comma-separated cgroup paths to profile (STACKSTREAM_AGENT_CGROUPS)", list(&a.Cgroups))
	fs.StringVar(&a.Comm, "comm", a.Comm, "profile processes whose comm matches this regexp (STACKSTREAM_AGENT_COMM)")
	fs.IntVar(&a.CountsMapSize, "counts-map-size", a.CountsMapSize, "STACKSTREAM_AGENT_COUNTS_MAP_SIZE")
	fs.IntVar(&a.StacksMapSize, "stacks-map-size", a.StacksMapSize, "STACKSTREAM_AGENT_STACKS_MAP_SIZE")
	fs.IntVar(&a.BufferRecords, "buffer-records", a.BufferRecords, "STACKSTREAM_AGENT_BUFFER_RECORDS")
	fs.IntVar(&a.BufferBytes, "buffer-bytes", a.BufferBytes, "STACKSTREAM_AGENT_BUFFER_BYTES")
	fs.BoolVar(&a.Memory, "memory", a.Memory, "publish RSS per process (STACKSTREAM_AGENT_MEMORY)")
	fs.Func("heap-endpoints", "comma-separated [service=]URL of pprof heap endpoints (STACKSTREAM_AGENT_HEAP_ENDPOINTS)", list(&a.HeapEndpoints))
	fs.StringVar(&a.ProcRoot, "proc-root", a.ProcRoot, "STACKSTREAM_AGENT_PROC_ROOT")
	fs.Int64Var(&a.MemoryLimit, "memory-limit", a.MemoryLimit, "soft Go heap limit in bytes (STACKSTREAM_AGENT_MEMORY_LIMIT)")
	fs.IntVar(&a.MaxProcs, "max-procs", a.MaxProcs, "threads running Go code at once; 0: one per CPU (STACKSTREAM_AGENT_MAX_PROCS)")
	fs.IntVar(&a.UnwindTableBytes, "unwind-table-bytes", a.UnwindTableBytes, "kernel memory for unwind tables; 0: frame pointers only (STACKSTREAM_AGENT_UNWIND_TABLE_BYTES)")
	fs.StringVar(&a.UnwindCacheDir, "unwind-cache-dir", a.UnwindCacheDir, "compiled unwind tables kept across restarts; empty: none (STACKSTREAM_AGENT_UNWIND_CACHE_DIR)")
	fs.Float64Var(&a.OffCPUProbability, "offcpu-probability", a.OffCPUProbability, "share of thread switch-outs recorded for the offcpu profile; 0: off (STACKSTREAM_AGENT_OFFCPU_PROBABILITY)")
	return fs
}

func list(dst *[]string) func(string) error {
	return func(s string) error { *dst = splitList(s); return nil }
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
