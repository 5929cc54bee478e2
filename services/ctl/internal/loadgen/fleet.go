package loadgen

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Fleet is the state every host shares: the services it runs, their
// deploys, the simulated binaries and the distinct stacks produced so far.
// Hosts call into it from several goroutines.
type Fleet struct {
	cfg      Config
	corpus   *Corpus
	start    time.Time // simulated time of the first interval
	services []catService

	mu       sync.Mutex
	binaries map[binaryKey]*Binary
	stacks   map[uint64]struct{}
}

// catService is one service of the fleet's catalogue.
type catService struct {
	name    string
	prog    *Program
	deploys []time.Duration // offsets from start at which a new binary is deployed, sorted
}

type binaryKey struct {
	file    string
	service int // -1: a shared library, the same build fleet-wide
	version int
}

// renameShare is the share of a service's functions a deploy renames (code
// changed), which gives each new binary stacks of its own.
const renameShare = 0.05

// NewFleet builds the catalogue and the deploy schedule for simulated time
// from start on.
func NewFleet(cfg Config, c *Corpus, start time.Time) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, corpus: c, start: start, binaries: map[binaryKey]*Binary{}, stacks: map[uint64]struct{}{}}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5e7c))
	n := cfg.CatalogueServices()
	f.services = make([]catService, n)
	for i := range f.services {
		f.services[i] = catService{name: fmt.Sprintf("svc%05d", i), prog: c.Programs[i%len(c.Programs)]}
	}
	if cfg.BinariesPerHour > 0 {
		every := time.Duration(float64(time.Hour) / cfg.BinariesPerHour)
		for at := every; at < cfg.Duration; at += every {
			s := rng.IntN(n)
			f.services[s].deploys = append(f.services[s].deploys, at)
		}
	}
	return f, nil
}

// version is the number of deploys of service s at simulated time t.
func (f *Fleet) version(s int, t time.Time) int {
	d := f.services[s].deploys
	off := t.Sub(f.start)
	return sort.Search(len(d), func(i int) bool { return d[i] > off })
}

// functionName is what frame fr of service s is called in its version v:
// the service's own code carries its name, and each deploy renames a few
// functions.
func (f *Fleet) functionName(s, v int, fr *Frame) string {
	if !fr.App || fr.Function == "" {
		return fr.Function
	}
	name := f.services[s].name + "/" + fr.Function
	for k := v; k > 0; k-- {
		if hashShare(fr.Function, k) < renameShare {
			return name + ".v" + strconv.Itoa(k)
		}
	}
	return name
}

// binary returns the simulated build of the native file of frame fr as run
// by service s in version v, creating it (and its debuginfo) on first use.
func (f *Fleet) binary(s, v int, fr *Frame) (*Binary, error) {
	key := binaryKey{file: fr.Binary, service: s, version: v}
	if !fr.App {
		key.service, key.version = -1, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.binaries[key]; b != nil {
		return b, nil
	}
	var names []string
	if fr.App {
		p := f.services[s].prog
		for i := range p.Frames {
			if g := &p.Frames[i]; g.App && g.Binary == fr.Binary && g.Function != "" {
				names = append(names, f.functionName(s, v, g))
			}
		}
	} else {
		for _, p := range f.corpus.Programs {
			for i := range p.Frames {
				if g := &p.Frames[i]; !g.App && g.Binary == fr.Binary && g.Function != "" {
					names = append(names, g.Function)
				}
			}
		}
	}
	b, err := newBinary(fmt.Sprintf("loadgen/%d/%s/%d/%d", f.cfg.Seed, key.file, key.service, key.version), fr.Binary, !fr.App, names)
	if err != nil {
		return nil, err
	}
	f.binaries[key] = b
	return b, nil
}

// noteStacks adds stack hashes to the distinct stacks seen and returns how
// many were new.
func (f *Fleet) noteStacks(hashes []uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, h := range hashes {
		if _, ok := f.stacks[h]; !ok {
			f.stacks[h] = struct{}{}
			n++
		}
	}
	return n
}

// DistinctStacks is how many distinct stacks (as the pipeline names their
// frames) the fleet produced so far.
func (f *Fleet) DistinctStacks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.stacks)
}

// Binaries is how many simulated builds exist so far.
func (f *Fleet) Binaries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.binaries)
}

// hashShare maps (s, k) to [0, 1) deterministically.
func hashShare(s string, k int) float64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	h.Write([]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)})
	return float64(h.Sum64()>>11) / (1 << 53)
}
