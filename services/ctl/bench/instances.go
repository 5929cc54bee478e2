package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instanceName is the i-th instance of a service: the service's own name for
// the first, "<service>.<i>" for the others.
func instanceName(svc string, i int) string {
	if i == 0 {
		return svc
	}
	return svc + "." + strconv.Itoa(i)
}

// serviceOf is the service (binary) an instance runs.
func serviceOf(inst string) string {
	svc, _, _ := strings.Cut(inst, ".")
	return svc
}

// addrOf is an instance's listen address: its service's port from
// -port-base, moved up by 100 per instance.
func (b *bench) addrOf(inst string) string {
	svc, n, _ := strings.Cut(inst, ".")
	i, _ := strconv.Atoi(n)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.o.portBase+slices.Index(services, svc)+100*i))
}

// instances lists the running instances of a service, first one first.
func (b *bench) instances(svc string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for inst := range b.procs {
		if serviceOf(inst) == svc {
			out = append(out, inst)
		}
	}
	sort.Strings(out)
	return out
}

// start starts an instance with its own listen address and log file
// (appended to, so a restarted instance keeps its earlier log).
func (b *bench) start(inst string) error {
	log, err := os.OpenFile(filepath.Join(b.logDir, inst+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(b.o.bin, serviceOf(inst)))
	// Each symbolizer instance has its own transactional ID, the same
	// after a restart (as a StatefulSet's pod name is), so a restarted
	// instance fences its own earlier self and nobody else.
	cmd.Env = append(b.env, "STACKSTREAM_LISTEN_ADDR="+b.addrOf(inst),
		"STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID="+b.id+"-"+strings.TrimPrefix(inst, "stackstream-"))
	if serviceOf(inst) == "stackstream-query" {
		cmd.Env = append(cmd.Env, "STACKSTREAM_QUERY_LISTEN_ADDR="+b.addrOf(inst))
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A port taken by another process (another bench) would answer its
	// /readyz and /metrics for this one.
	if l, err := net.Listen("tcp", b.addrOf(inst)); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %s is taken (another bench running? -port-base moves the ports): %w", inst, b.addrOf(inst), err)
	} else {
		l.Close()
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w (run make build)", inst, err)
	}
	go func() {
		err := cmd.Wait()
		log.Close()
		// Still listed: nobody stopped it (kill and stopAll unlist first).
		b.mu.Lock()
		own := b.procs[inst] == cmd
		b.mu.Unlock()
		if own {
			b.fail(fmt.Errorf("%s exited by itself (%v); its log: %s", inst, err, log.Name()))
		}
	}()
	b.mu.Lock()
	b.procs[inst] = cmd
	b.mu.Unlock()
	return nil
}

// kill stops an instance with SIGKILL, as a crash or a lost node would,
// and keeps the CPU it used so far.
func (b *bench) kill(inst string) {
	b.mu.Lock()
	cmd := b.procs[inst]
	delete(b.procs, inst)
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	var counters map[string]float64
	if _, ok := counterSeries[serviceOf(inst)]; ok {
		counters = b.instanceCounters(inst)
	}
	cpu := cpuOf(map[string]int{inst: cmd.Process.Pid})[inst]
	cmd.Process.Kill()
	b.mu.Lock()
	b.deadCPU[serviceOf(inst)] += cpu
	for k, v := range counters {
		b.deadCounters[k] += v
	}
	b.mu.Unlock()
}

// stop ends an instance with SIGTERM (it leaves its group and writes what
// it holds) and waits for it, as a scale-down does.
func (b *bench) stop(inst string) {
	b.mu.Lock()
	cmd := b.procs[inst]
	delete(b.procs, inst)
	b.mu.Unlock()
	if cmd != nil {
		terminate(inst, cmd)
	}
}

// stopAll ends every instance (terminate).
func (b *bench) stopAll() {
	b.mu.Lock()
	procs := b.procs
	b.procs = map[string]*exec.Cmd{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for inst, cmd := range procs {
		wg.Go(func() { terminate(inst, cmd) })
	}
	wg.Wait()
}

// terminate sends SIGTERM to an instance no longer listed and waits up to
// 40 s for it to exit, then kills it.
func terminate(inst string, cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(40 * time.Second)
	for cmd.Process.Signal(syscall.Signal(0)) == nil {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "bench: %s did not stop in 40 s; killed\n", inst)
			cmd.Process.Kill()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReady waits for /readyz of every running instance.
func (b *bench) waitReady(ctx context.Context) error {
	b.mu.Lock()
	var insts []string
	for inst := range b.procs {
		insts = append(insts, inst)
	}
	b.mu.Unlock()
	for _, inst := range insts {
		addr := b.addrOf(inst)
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s not ready on %s after 60 s (log: %s/%s.log)", inst, addr, b.logDir, inst)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nil
}

// pids are the processes measured: every consumer instance started here,
// and Kafka and OpenSearch from their make up pid files.
func (b *bench) pids() map[string]int {
	out := map[string]int{}
	b.mu.Lock()
	for inst, c := range b.procs {
		if serviceOf(inst) != "stackstream-query" {
			out[inst] = c.Process.Pid
		}
	}
	b.mu.Unlock()
	for name, f := range map[string]string{"kafka": ".run/kafka/kafka.pid", "opensearch": ".run/opensearch/opensearch.pid"} {
		if s, err := os.ReadFile(filepath.Join(b.o.repo, f)); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(s))); err == nil {
				out[name] = pid
			}
		}
	}
	return out
}

// serviceCPU sums CPU seconds by service over its instances, killed ones
// included.
func (b *bench) serviceCPU(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for inst, cpu := range cpuOf(pids) {
		out[serviceOf(inst)] += cpu
	}
	b.mu.Lock()
	for svc, cpu := range b.deadCPU {
		out[svc] += cpu
	}
	b.mu.Unlock()
	return out
}
