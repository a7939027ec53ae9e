package ring

import (
	"fmt"
	"testing"
)

// Partition and InlinePartition find the partition Owner reads, and
// SuccessorTable names what Successors(key, 1) names, for every key.
func TestPartitionTables(t *testing.T) {
	r, err := New(DefaultConfig(), []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	owners, succ := r.Partitions(), r.SuccessorTable()
	if len(succ) != len(owners) {
		t.Fatalf("SuccessorTable has %d entries for %d partitions", len(succ), len(owners))
	}
	for i := range 20000 {
		key := fmt.Sprintf("k|%d", i) // a '|' in the key itself, as callers may send
		stored := inlineTag + "spec|" + key
		p := Partition(stored, len(owners))
		if q := InlinePartition(key, len(owners)); q != p {
			t.Fatalf("key %q: InlinePartition %d, Partition of the stored key %d", key, q, p)
		}
		if q := Partition(inlineTag+"|"+key, len(owners)); q != p {
			t.Fatalf("key %q: partition of its owner key %d, of its stored key %d", key, q, p)
		}
		if o, _ := r.Owner(stored); owners[p] != o {
			t.Fatalf("key %q: partition %d's owner %s, Owner says %s", key, p, owners[p], o)
		}
		if s := r.Successors(stored, 1)[0]; succ[p] != s {
			t.Fatalf("key %q: SuccessorTable says %s, Successors %s", key, succ[p], s)
		}
	}
	one, _ := New(DefaultConfig(), []string{"a"})
	if one.SuccessorTable() != nil {
		t.Fatal("a one-member ring has a successor table")
	}
}
