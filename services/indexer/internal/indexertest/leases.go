package indexertest

import (
	"encoding/json"
	"fmt"
)

// LeasesBehind is how many operations of the primaries in shardStats (the
// answer of GET <indices>/_stats/docs?level=shards) are not yet below
// every retention lease: until it is 0, a force merge keeps the recovery
// sources of those operations and the store size overstates the indices.
func LeasesBehind(shardStats []byte) (int64, error) {
	var s struct {
		Indices map[string]struct {
			Shards map[string][]struct {
				Routing struct {
					Primary bool `json:"primary"`
				} `json:"routing"`
				SeqNo struct {
					Max int64 `json:"max_seq_no"`
				} `json:"seq_no"`
				Leases struct {
					Leases []struct {
						Retaining int64 `json:"retaining_seq_no"`
					} `json:"leases"`
				} `json:"retention_leases"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := json.Unmarshal(shardStats, &s); err != nil {
		return 0, fmt.Errorf("shard stats: %w", err)
	}
	var behind int64
	for _, idx := range s.Indices {
		for _, copies := range idx.Shards {
			for _, c := range copies {
				if !c.Routing.Primary {
					continue
				}
				for _, l := range c.Leases.Leases {
					if d := c.SeqNo.Max + 1 - l.Retaining; d > 0 {
						behind += d
					}
				}
			}
		}
	}
	return behind, nil
}
