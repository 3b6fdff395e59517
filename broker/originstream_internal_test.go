package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestOriginStreamKey(t *testing.T) {
	for _, tc := range []struct {
		region string
		inc    uint64
		key    string
	}{{"a", 0, "a"}, {"a", 3, "a@3"}, {"eu-west-1", 1 << 62, "eu-west-1@4611686018427387904"}} {
		if k := originStreamKey(tc.region, tc.inc); k != tc.key {
			t.Errorf("originStreamKey(%q, %d) = %q, want %q", tc.region, tc.inc, k, tc.key)
		}
		if r, inc := splitOriginStream(tc.key); r != tc.region || inc != tc.inc {
			t.Errorf("splitOriginStream(%q) = %q, %d", tc.key, r, inc)
		}
		if err := validateOriginStream("k", tc.key); err != nil {
			t.Errorf("validateOriginStream(%q): %v", tc.key, err)
		}
	}
	for _, bad := range []string{"a@", "a@0", "a@01", "a@x", "@3", "a@1@2"} {
		err := validateOriginStream("vector.origins key", bad)
		if err == nil || !strings.Contains(err.Error(), "vector.origins key") {
			t.Errorf("validateOriginStream(%q) = %v, want an error naming the field", bad, err)
		}
	}
	p := provisionalIncarnation(time.UnixMilli(1700000000000))
	if p&provisionalBit == 0 || p == provisionalIncarnation(time.UnixMilli(1700000000001)) {
		t.Errorf("provisional incarnation %d", p)
	}
}

// TestPruneIncarnations: the dedup marks of old origin incarnations stay
// pinned up to the bound per origin region; beyond it the lowest go, other
// regions' and producers' names untouched.
func TestPruneIncarnations(t *testing.T) {
	d := newDedupTable(100)
	d.maxStreams = 3
	for inc := range uint64(6) {
		d.stored(replDedupName(originStreamKey("a", inc)), 1, 1, pos{1, int64(inc)}, 1)
		d.pruneIncarnations("a")
	}
	d.stored(replDedupName("b@7"), 1, 1, pos{2, 0}, 1)
	d.stored("producer", 1, 1, pos{2, 1}, 1)
	d.pruneIncarnations("a")
	var got []string
	for _, inc := range []uint64{0, 1, 2, 3, 4, 5} {
		if _, ok := d.byName[replDedupName(originStreamKey("a", inc))]; ok {
			got = append(got, fmt.Sprint(inc))
		}
	}
	if strings.Join(got, ",") != "3,4,5" {
		t.Fatalf("kept incarnations of a: %v, want 3,4,5", got)
	}
	if d.len() != 5 || d.lru.Len() != 5 {
		t.Fatalf("%d names (%d in LRU), want 5", d.len(), d.lru.Len())
	}
	if rs := d.replRegions(); strings.Join(rs, ",") != "a,b" {
		t.Fatalf("replRegions %v", rs)
	}
}
