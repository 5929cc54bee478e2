package aggregate

import (
	"math"
	"testing"

	"github.com/stackstream/stackstream/schemas/record"
)

// TestStackCacheCharged: the partitions sharing a Budget share one stack
// cache (a stack seen by one is a hit in the other), its bytes are charged
// to the Budget, and it gives way to the state: a Budget that holds the
// state of a profile but not the cache too drops the cache instead of
// refusing the profile.
func TestStackCacheCharged(t *testing.T) {
	profs, hostOf := fleetProfiles(2, 1)
	b := &Budget{MaxBytes: math.MaxInt64}
	cfg := testConfig()
	cfg.Budget = b
	p0, p1 := NewPartition(cfg, Checkpoint{}), NewPartition(cfg, Checkpoint{})
	if _, err := p0.Add(Input{Profile: profs[0], Type: record.ProfileCPU, Host: hostOf[0]}); err != nil {
		t.Fatal(err)
	}
	cached := p0.stacks.bytes
	if cached == 0 || b.Used() != p0.bytes+cached || b.CacheBytes() != cached {
		t.Fatalf("charged %d, want the state %d + the cache %d", b.Used(), p0.bytes, cached)
	}
	// The same stacks on another host of another partition: all hits.
	n := p1.stacks.n
	if _, err := p1.Add(Input{Profile: profs[0], Type: record.ProfileCPU, Host: "other"}); err != nil {
		t.Fatal(err)
	}
	if p1.stacks != p0.stacks || p1.stacks.n != n {
		t.Fatalf("the second partition cached %d stacks again", p1.stacks.n-n)
	}
	// A budget with room for the state of the next profile only: the
	// cache goes, the profile is folded in.
	b.MaxBytes = b.Used() - cached + p0.newBytes(nil, 0) + 1<<20
	before := p0.bytes
	if _, err := p0.Add(Input{Profile: profs[1], Type: record.ProfileCPU, Host: hostOf[1], Offset: 1}); err != nil {
		t.Fatalf("with the cache dropped the state fits: %v", err)
	}
	if p0.bytes == before || b.Used() > b.MaxBytes {
		t.Fatalf("state %d -> %d, charged %d of %d", before, p0.bytes, b.Used(), b.MaxBytes)
	}
	if b.Used() != p0.bytes+p1.bytes+p0.stacks.bytes {
		t.Fatalf("charged %d, want state %d + %d and cache %d", b.Used(), p0.bytes, p1.bytes, p0.stacks.bytes)
	}
}

// TestStackCacheGivesWayInPart: giving way to the state drops what it must
// and an eighth of the stacks' bytes more, not the whole cache, and the
// charge stays the stacks held and the frame table; giving way more than
// the stacks hold drops the table too.
func TestStackCacheGivesWayInPart(t *testing.T) {
	profs, hostOf := fleetProfiles(4, 1)
	b := &Budget{MaxBytes: math.MaxInt64}
	cfg := testConfig()
	cfg.Budget = b
	p := NewPartition(cfg, Checkpoint{})
	for i, prof := range profs {
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := p.stacks
	n, bytes, used := c.n, c.bytes, b.Used()
	if n < 100 {
		t.Fatalf("%d stacks cached", n)
	}
	stacks := bytes - c.tableBytes
	c.giveWay(stacks / 10)
	freed := bytes - c.bytes
	if freed < stacks/10 || freed > stacks/10+stacks/8+stacks/20 || c.n == 0 || c.n == n {
		t.Fatalf("gave %d of %d bytes of stacks (%d -> %d stacks) for %d", freed, stacks, n, c.n, stacks/10)
	}
	var held int64
	for _, st := range c.m {
		held += st.cachedBytes
	}
	if held+c.tableBytes != c.bytes || len(c.m) != c.n || b.Used() != used-freed {
		t.Fatalf("held %d, charged %d; %d entries, %d counted; budget %d, want %d", held, c.bytes, len(c.m), c.n, b.Used(), used-freed)
	}
	c.giveWay(c.bytes - c.tableBytes)
	if c.n != 0 || c.bytes != 0 || len(c.table.frames) != 0 || b.Used() != used-bytes {
		t.Fatalf("after giving way all the stacks: %d stacks, %d bytes, %d frames, budget %d", c.n, c.bytes, len(c.table.frames), b.Used())
	}
}
