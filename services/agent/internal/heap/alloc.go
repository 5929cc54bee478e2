package heap

import (
	"fmt"

	"github.com/google/pprof/profile"
)

// Allocs turns the allocation counts of a Go heap profile, which count from
// the process's start, into what was allocated since the endpoint's previous
// scrape: the `alloc` profile type. The first scrape of an endpoint only
// sets the baseline; a process restart (totals that went down) starts a new
// one from that scrape.
type Allocs struct {
	prev map[string]*profile.Profile // by endpoint URL: the last scrape's alloc part
}

// NewAllocs returns an empty baseline set.
func NewAllocs() *Allocs { return &Allocs{prev: map[string]*profile.Profile{}} }

// Delta returns the allocations of endpoint url since its last scrape, nil
// when p has no alloc_objects and alloc_space or this is its first scrape.
// Samples whose counts did not move are left out.
func (a *Allocs) Delta(url string, p *profile.Profile) (*profile.Profile, error) {
	cur := allocPart(p)
	if cur == nil {
		delete(a.prev, url)
		return nil, nil
	}
	prev := a.prev[url]
	a.prev[url] = cur
	if prev == nil {
		return nil, nil
	}
	if total(cur) < total(prev) {
		// The process restarted: what it allocated since is all new.
		return nonZero(cur.Copy()), nil
	}
	neg := prev.Copy()
	neg.Scale(-1)
	d, err := profile.Merge([]*profile.Profile{cur.Copy(), neg})
	if err != nil {
		return nil, fmt.Errorf("alloc delta of %s: %w", url, err)
	}
	d.TimeNanos, d.DurationNanos = cur.TimeNanos, cur.TimeNanos-prev.TimeNanos
	return nonZero(d), nil
}

// Forget drops the baselines of endpoints no longer scraped.
func (a *Allocs) Forget(keep map[string]bool) {
	for u := range a.prev {
		if !keep[u] {
			delete(a.prev, u)
		}
	}
}

// allocPart is p with only its alloc_objects and alloc_space values, nil
// when it has not both.
func allocPart(p *profile.Profile) *profile.Profile {
	objs, space := -1, -1
	for i, st := range p.SampleType {
		switch st.Type {
		case "alloc_objects":
			objs = i
		case "alloc_space":
			space = i
		}
	}
	if objs < 0 || space < 0 {
		return nil
	}
	out := p.Copy()
	out.SampleType = []*profile.ValueType{out.SampleType[objs], out.SampleType[space]}
	out.DefaultSampleType = "alloc_space"
	for _, s := range out.Sample {
		s.Value = []int64{s.Value[objs], s.Value[space]}
	}
	return out
}

// total is the profile's alloc_space.
func total(p *profile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[1]
	}
	return n
}

// nonZero drops the samples that allocated nothing (or went negative: the
// counts of a stack whose sampled records were reordered, never real).
func nonZero(p *profile.Profile) *profile.Profile {
	kept := p.Sample[:0]
	for _, s := range p.Sample {
		if s.Value[0] > 0 && s.Value[1] > 0 {
			kept = append(kept, s)
		}
	}
	p.Sample = kept
	return p
}
