package indexertest

import "testing"

func TestLeasesBehind(t *testing.T) {
	stats := []byte(`{"indices":{"a":{"shards":{"0":[
		{"routing":{"primary":true},"seq_no":{"max_seq_no":99},"retention_leases":{"leases":[{"retaining_seq_no":90},{"retaining_seq_no":100}]}},
		{"routing":{"primary":false},"seq_no":{"max_seq_no":99},"retention_leases":{"leases":[{"retaining_seq_no":0}]}}]}}}}`)
	if got, err := LeasesBehind(stats); err != nil || got != 10 {
		t.Fatalf("LeasesBehind = %d, %v; want 10 (the primary's first lease; replicas ignored)", got, err)
	}
	if _, err := LeasesBehind([]byte("{")); err == nil {
		t.Fatal("no error for a broken answer")
	}
}
