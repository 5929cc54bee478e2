// Command stacks reads the CPU profiles an agent published under a topic
// prefix and prints how complete their user stacks are: the share of samples
// whose outermost user frame is a thread's or process's root (_start or the
// executable's entry point, __libc_start_main, clone3, start_thread, Go's
// runtime.goexit, mstart or rt0_go; mcall or morestack on g0), or that has
// no user frame and a kernel stack in exec (the old program's stack gone, the
// new one's not made yet: counted, and said on stderr), and the median number
// of user frames.
// Frames are named from the debuginfo the agent published. Usage:
// stacks PREFIX (broker from STACKSTREAM_KAFKA_BROKERS, default
// 127.0.0.1:9092). Output: "complete_percent median_depth samples";
// STACKS_VERBOSE=1 also prints each incomplete stack to stderr.
package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
)

// STACKS_VERBOSE=1 prints every incomplete stack to stderr.
var verbose = os.Getenv("STACKS_VERBOSE") == "1"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: stacks PREFIX")
		os.Exit(2)
	}
	brokers := os.Getenv("STACKSTREAM_KAFKA_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:9092"
	}
	profiles, files, err := read(record.TopicsFor(os.Args[1]), brokers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stacks:", err)
		os.Exit(1)
	}
	var total, done, execs int64
	var depths []int
	for _, p := range profiles {
		for _, s := range p.Sample {
			var user []*profile.Location
			for _, loc := range s.Location {
				if loc.Mapping != nil && loc.Mapping.File != record.MappingKernel {
					user = append(user, loc)
				}
			}
			n := s.Value[0]
			total += n
			if len(user) > 0 && isRoot(user[len(user)-1], len(user) > 1, files) {
				done += n
			} else if len(user) == 0 && inExec(s) {
				// The kernel loading the program: the old program's stack is
				// gone and the new one's not made yet; the kernel's stack is
				// the whole story.
				done += n
				execs += n
			} else if verbose {
				fmt.Fprintf(os.Stderr, "incomplete: %d sample(s) pid %v at %s:", n, s.NumLabel["pid"], time.Unix(0, p.TimeNanos).UTC().Format("15:04:05"))
				for i, loc := range user {
					fmt.Fprintf(os.Stderr, " %s", name(loc, i > 0, files))
				}
				if len(user) == 0 {
					// What the process was doing in the kernel, and who it was.
					fmt.Fprintf(os.Stderr, " (no user frames; labels %v; kernel:", s.Label)
					for _, loc := range s.Location {
						if len(loc.Line) > 0 && loc.Line[0].Function != nil {
							fmt.Fprintf(os.Stderr, " %s", loc.Line[0].Function.Name)
						} else {
							fmt.Fprintf(os.Stderr, " %#x", loc.Address)
						}
					}
					fmt.Fprint(os.Stderr, ")")
				}
				fmt.Fprintln(os.Stderr)
			}
			for range n {
				depths = append(depths, len(user))
			}
		}
	}
	if total == 0 {
		fmt.Println("0 0 0")
		return
	}
	sort.Ints(depths)
	if execs > 0 {
		fmt.Fprintf(os.Stderr, "stacks: %d sample(s) in the kernel's exec, no user stack: counted complete\n", execs)
	}
	fmt.Printf("%.1f %d %d\n", 100*float64(done)/float64(total), depths[len(depths)/2], total)
}

var roots = map[string]bool{"_start": true, "__libc_start_main": true, "__libc_start_call_main": true,
	"clone3": true, "clone": true, "start_thread": true, "runtime.goexit": true, "runtime.mstart": true,
	"runtime.rt0_go": true, "runtime.goexit.abi0": true, "runtime.mstart.abi0": true, "runtime.rt0_go.abi0": true,
	// The base of g0's stack while the scheduler or newstack runs on it.
	"runtime.mcall": true, "runtime.morestack": true, "runtime.mcall.abi0": true, "runtime.morestack.abi0": true}

// inExec reports whether a sample's kernel stack is an exec's.
func inExec(s *profile.Sample) bool {
	for _, loc := range s.Location {
		if loc.Mapping != nil && loc.Mapping.File != record.MappingKernel {
			continue
		}
		for _, l := range loc.Line {
			if l.Function != nil && (strings.Contains(l.Function.Name, "execve") || l.Function.Name == "load_elf_binary" || l.Function.Name == "begin_new_exec") {
				return true
			}
		}
	}
	return false
}

// isRoot names a frame through its file's debuginfo; a stripped
// executable's _start is its entry point.
func isRoot(loc *profile.Location, returnAddr bool, files map[string]*debuginfo.File) bool {
	m := loc.Mapping
	addr := loc.Address
	if returnAddr {
		addr--
	}
	d := files[m.BuildID]
	if d == nil {
		return false
	}
	vaddr, ok := d.VaddrOf(addr - m.Start + m.Offset)
	if !ok {
		return false
	}
	if sym, _, ok := d.Symbolize(vaddr); ok {
		return roots[strings.TrimSuffix(sym.Name, "@plt")]
	}
	f, err := elf.Open(m.File)
	if err != nil {
		return false
	}
	defer f.Close()
	return vaddr >= f.Entry && vaddr < f.Entry+64
}

// name is a frame's function through its file's debuginfo, or its file and
// offset.
func name(loc *profile.Location, returnAddr bool, files map[string]*debuginfo.File) string {
	m := loc.Mapping
	addr := loc.Address
	if returnAddr {
		addr--
	}
	if len(loc.Line) > 0 && loc.Line[0].Function != nil {
		return loc.Line[0].Function.Name
	}
	if d := files[m.BuildID]; d != nil {
		if vaddr, ok := d.VaddrOf(addr - m.Start + m.Offset); ok {
			if sym, _, ok := d.Symbolize(vaddr); ok {
				return sym.Name
			}
		}
	}
	return fmt.Sprintf("%s+%#x", m.File, addr-m.Start+m.Offset)
}

// read consumes the CPU profiles and the debuginfo up to their current end.
func read(topics record.Topics, brokers string) ([]*profile.Profile, map[string]*debuginfo.File, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topics.ProfilesRaw, topics.Debuginfo),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics.ProfilesRaw, topics.Debuginfo)
	if err != nil {
		return nil, nil, err
	}
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	var profiles []*profile.Profile
	files := map[string]*debuginfo.File{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("consume: %w (waiting for %v)", ctx.Err(), want)
		}
		var bad error
		fs.EachRecord(func(rec *kgo.Record) {
			k := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
			if end, ok := want[k]; ok && rec.Offset+1 >= end {
				delete(want, k)
			}
			if rec.Topic == topics.Debuginfo {
				d, err := debuginfo.Decode(rec.Value)
				if err != nil {
					bad = fmt.Errorf("debuginfo %s: %w", rec.Key, err)
					return
				}
				files[d.BuildID] = d
				return
			}
			meta, err := record.ParseMeta(rec.Headers)
			if err != nil || meta.Type != record.ProfileCPU {
				return
			}
			p, err := record.DecodeProfile(rec.Value)
			if err != nil {
				bad = fmt.Errorf("decode profile: %w", err)
				return
			}
			profiles = append(profiles, p)
		})
		if bad != nil {
			return nil, nil, bad
		}
	}
	return profiles, files, nil
}
