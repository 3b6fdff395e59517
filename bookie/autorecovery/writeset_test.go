package autorecovery

import "testing"

// TestWriteSetHas compares writeSetHas with the write set spelled out:
// entry e goes to positions e, e+1, ..., e+Qw-1 (mod E).
func TestWriteSetHas(t *testing.T) {
	for ens := 1; ens <= 6; ens++ {
		for qw := 1; qw <= ens; qw++ {
			for e := int64(0); e < 40; e++ {
				in := map[int]bool{}
				for i := range qw {
					in[int((e+int64(i))%int64(ens))] = true
				}
				for p := range ens {
					if got := writeSetHas(e, ens, qw, p); got != in[p] {
						t.Fatalf("E=%d Qw=%d e=%d p=%d: got %v want %v", ens, qw, e, p, got, in[p])
					}
				}
			}
		}
	}
}

func TestSortedUnion(t *testing.T) {
	got, changed := sortedUnion([]string{"b", "a"}, []string{"a", "c"})
	if !changed || len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("got %v %v", got, changed)
	}
	if _, changed := sortedUnion([]string{"a"}, []string{"a"}); changed {
		t.Fatal("no-op union reported a change")
	}
}
