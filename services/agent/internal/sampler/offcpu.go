package sampler

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/stackstream/stackstream/bpf/profiler"
)

// OffCPU configures off-CPU profiling (bpf/profiler/offcpu.h): the time
// user threads spend switched out, with the stack they blocked at.
type OffCPU struct {
	// Probability that a switch-out is recorded (its stacks walked);
	// 0 turns off-CPU profiling off. Blocked times are scaled by its
	// inverse, so totals estimate every thread's blocked time.
	Probability float64
	// Blocks shorter than this are dropped when the thread switches in;
	// the profile then holds only the blocks at least this long.
	MinBlock time.Duration
	// Threads switched out and recorded at once (the offcpu_starts map);
	// more are not recorded, and counted.
	Threads int
}

// DefaultOffCPUThreads sizes offcpu_starts.
const DefaultOffCPUThreads = 16384

// Validate checks the off-CPU settings.
func (o OffCPU) Validate() error {
	switch {
	case math.IsNaN(o.Probability) || o.Probability < 0 || o.Probability > 1:
		return fmt.Errorf("off-CPU probability %v: use 0 (off) up to 1", o.Probability)
	case o.Probability > 0 && o.Probability*profiler.OffCPUThresholdOne < 1:
		return fmt.Errorf("off-CPU probability %v: below 2^-32, use 0 to turn it off", o.Probability)
	case o.MinBlock < 0:
		return fmt.Errorf("off-CPU minimum block %s: use 0 or more", o.MinBlock)
	case o.Probability > 0 && (o.Threads < 64 || o.Threads > 1<<22):
		return fmt.Errorf("off-CPU threads %d: use 64..%d", o.Threads, 1<<22)
	}
	return nil
}

// threshold is offcpu_threshold: a switch-out is recorded when a random
// 32-bit number is below it.
func (o OffCPU) threshold() uint64 {
	return uint64(math.Round(o.Probability * profiler.OffCPUThresholdOne))
}

// OffCPUCounters are cumulative since start.
type OffCPUCounters struct {
	Recorded   uint64 // switch-outs of user threads recorded: stacks walked
	Blocks     uint64 // recorded blocks counted at switch-in
	Short      uint64 // recorded blocks shorter than MinBlock, dropped
	StartsFull uint64 // switch-outs not recorded: offcpu_starts full
	CountsFull uint64 // blocks lost: offcpu_counts full
	// Stacks not stored: a stack map bucket holding another stack
	// (-EEXIST), or full; the block counts without that stack.
	StackErrors uint64
}

// offCPUSpec sets the off-CPU constants and map sizes before loading.
func offCPUSpec(spec *ebpf.CollectionSpec, cfg Config) error {
	if cfg.OffCPU.Probability == 0 {
		return nil
	}
	if err := cfg.OffCPU.Validate(); err != nil {
		return err
	}
	if err := spec.Variables[profiler.ProfileVarOffcpuThreshold].Set(cfg.OffCPU.threshold()); err != nil {
		return fmt.Errorf("set offcpu_threshold: %w", err)
	}
	if err := spec.Variables[profiler.ProfileVarOffcpuMinNs].Set(uint64(cfg.OffCPU.MinBlock.Nanoseconds())); err != nil {
		return fmt.Errorf("set offcpu_min_ns: %w", err)
	}
	for _, name := range []string{profiler.ProfileMapOffcpuCounts0, profiler.ProfileMapOffcpuCounts1} {
		spec.Maps[name].MaxEntries = uint32(cfg.CountsSize)
	}
	spec.Maps[profiler.ProfileMapOffcpuStarts].MaxEntries = uint32(cfg.OffCPU.Threads)
	return nil
}

// attachOffCPU attaches the sched_switch program (BTF-enabled: no tracefs).
func (s *Sampler) attachOffCPU() error {
	if s.cfg.OffCPU.Probability == 0 {
		return nil
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OffcpuSwitch})
	if err != nil {
		return fmt.Errorf("attach bpf program to sched_switch: %w", err)
	}
	s.links = append(s.links, l)
	return nil
}

// OffCPUSamples hands over the off-CPU samples the last Drain collected
// (nil when off-CPU profiling is off): Count is the blocks recorded,
// PeriodNanos the time blocked, scaled by the inverse of the probability.
func (s *Sampler) OffCPUSamples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.offSamples
	s.offSamples = nil
	return out
}

// stackRefs are stack IDs and unwound-stack hashes of one generation.
type stackRefs struct {
	ids    map[int32]bool
	hashes map[uint64]bool
}

func (r *stackRefs) add(k profiler.ProfileSampleKey) {
	if r.ids == nil {
		r.ids, r.hashes = map[int32]bool{}, map[uint64]bool{}
	}
	r.ids[k.KernelStackId] = true
	r.ids[k.UserStackId] = true
	if k.UserStackHash != 0 {
		r.hashes[k.UserStackHash] = true
	}
}

// drainOffCPU reads and empties the idle generation's off-CPU counts. stack
// and unwoundStack read (and mark for deletion) the idle generation's
// stacks; a block that started in the generation before lives in the
// current one's, read as they are and deleted at that generation's next
// drain (offDeferred). It returns the idle generation's stacks
// that must stay: those of blocks still under way, and of blocks that
// started in it and ended after the flip.
func (s *Sampler) drainOffCPU(idle uint32, stack func(int32) []uint64, unwoundStack func(uint64) []uint64) ([]Sample, stackRefs, error) {
	counts, other, otherStacks, otherUnwound := s.objs.OffcpuCounts0, s.objs.OffcpuCounts1, s.objs.Stacks1, s.objs.UnwoundStacks1
	if idle == 1 {
		counts, other, otherStacks, otherUnwound = s.objs.OffcpuCounts1, s.objs.OffcpuCounts0, s.objs.Stacks0, s.objs.UnwoundStacks0
	}
	scale := float64(profiler.OffCPUThresholdOne) / float64(s.cfg.OffCPU.threshold())
	var (
		key     profiler.ProfileOffcpuKey
		val     profiler.ProfileSampleValue
		keys    []profiler.ProfileOffcpuKey
		samples []Sample
		frames  [profiler.MaxStackDepth]uint64
		us      profiler.ProfileUnwoundStack
	)
	current := func(id int32) []uint64 {
		if id < 0 || otherStacks.Lookup(uint32(id), &frames) != nil {
			return nil
		}
		var st []uint64
		for _, pc := range frames {
			if pc == 0 {
				break
			}
			st = append(st, pc)
		}
		return st
	}
	it := counts.Iterate()
	for it.Next(&key, &val) {
		keys = append(keys, key)
		k := key.Stack
		var user, kernel []uint64
		if key.StackGen == idle {
			user, kernel = stack(k.UserStackId), stack(k.KernelStackId)
			if k.UserStackHash != 0 {
				user = unwoundStack(k.UserStackHash)
			}
		} else {
			s.offDeferred[key.StackGen&1].add(k)
			user, kernel = current(k.UserStackId), current(k.KernelStackId)
			if k.UserStackHash != 0 && otherUnwound.Lookup(k.UserStackHash, &us) == nil {
				user = append([]uint64(nil), us.Frames[:min(int(us.Len), len(us.Frames))]...)
			}
		}
		samples = append(samples, Sample{
			PID: int(k.Pid), Comm: commString(k.Comm),
			User: user, Unwound: k.UserStackHash != 0, Kernel: kernel,
			Count: val.Count, PeriodNanos: uint64(math.Round(float64(val.PeriodNs) * scale)),
		})
	}
	if err := it.Err(); err != nil {
		return samples, stackRefs{}, fmt.Errorf("iterate off-cpu counts: %w", err)
	}
	if _, err := counts.BatchDelete(keys, nil); err != nil {
		for _, k := range keys {
			counts.Delete(k)
		}
	}
	// Blocks under way first: one that ends during this scan is counted in
	// the current generation before the scan below reads it.
	var keep stackRefs
	var startKey uint32
	var start profiler.ProfileOffcpuStart
	err := batchEach(s.objs.OffcpuStarts, &startKey, &start, func() {
		if start.Key.StackGen == idle {
			keep.add(start.Key.Stack)
		}
	})
	if err != nil {
		return samples, keep, fmt.Errorf("read off-cpu starts: %w", err)
	}
	err = batchEach(other, &key, &val, func() {
		if key.StackGen == idle {
			keep.add(key.Stack)
		}
	})
	if err != nil {
		return samples, keep, fmt.Errorf("read off-cpu counts: %w", err)
	}
	return samples, keep, nil
}

// batchEach calls f with every entry of a hash map that BPF programs keep
// changing: a batch read goes bucket by bucket, so an entry present during
// the whole read is seen once (an iteration by keys starts over when its
// current key is deleted).
func batchEach[K, V any](m *ebpf.Map, k *K, v *V, f func()) error {
	const batch = 1024
	keys, vals := make([]K, batch), make([]V, batch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			*k, *v = keys[i], vals[i]
			f()
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// OffCPUCounters reads the off-CPU counters summed over CPUs.
func (s *Sampler) OffCPUCounters() (OffCPUCounters, error) {
	var c OffCPUCounters
	dst := []*uint64{&c.Recorded, &c.Blocks, &c.Short, &c.StartsFull, &c.CountsFull, &c.StackErrors}
	for i := range profiler.NumOffCPUCounters {
		var perCPU []uint64
		if err := s.objs.OffcpuCounters.Lookup(uint32(i), &perCPU); err != nil {
			return c, fmt.Errorf("read off-cpu counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			*dst[i] += v
		}
	}
	return c, nil
}
