package broker

import (
	"fmt"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

func ksSub(consumers ...*consumer) *subscription {
	s := &subscription{name: "s", typ: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_KEY_SHARED, consumers: consumers}
	s.rebuildKeySharedLocked()
	return s
}

// TestKeySharedRangesPartitionTheSpace: in both modes, the ranges each
// consumer reports are exactly the slots ownerLocked routes to it, and in
// AUTO_SPLIT every slot has an owner and a join moves only the joining
// consumer's share.
func TestKeySharedRangesPartitionTheSpace(t *testing.T) {
	var cs []*consumer
	for i := range 4 {
		cs = append(cs, &consumer{name: fmt.Sprintf("consumer-%d", i)})
	}
	check := func(s *subscription, wantCovered bool) map[int32]*consumer {
		t.Helper()
		owner := map[int32]*consumer{}
		for _, c := range s.consumers {
			for _, r := range s.rangesOfLocked(c) {
				for slot := r.Start; slot <= r.End; slot++ {
					if o, ok := owner[slot]; ok {
						t.Fatalf("slot %d in the ranges of %s and %s", slot, o.name, c.name)
					}
					owner[slot] = c
				}
			}
		}
		for slot := int32(0); slot < wire.KeySlots; slot++ {
			got := s.ownerLocked(slot)
			if got != owner[slot] {
				t.Fatalf("slot %d: ownerLocked %v, ranges say %v", slot, got, owner[slot])
			}
			if wantCovered && got == nil {
				t.Fatalf("slot %d has no owner", slot)
			}
		}
		return owner
	}
	before := check(ksSub(cs[:3]...), true)
	after := check(ksSub(cs...), true)
	share := map[string]int{}
	for slot, c := range after {
		share[c.name]++
		if b := before[slot]; b != c && c != cs[3] {
			t.Fatalf("slot %d moved from %s to %s, not to the joining consumer", slot, b.name, c.name)
		}
	}
	for name, n := range share {
		if n < wire.KeySlots/4/2 || n > wire.KeySlots/4*2 {
			t.Errorf("consumer %s owns %d slots of %d (4 consumers)", name, n, wire.KeySlots)
		}
	}
	// STICKY with a gap: the gap has no owner.
	sticky := func(name string, rs ...[2]int32) *consumer {
		p := &clientv1.KeySharedPolicy{Mode: clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY}
		for _, r := range rs {
			p.Ranges = append(p.Ranges, &clientv1.HashRange{Start: r[0], End: r[1]})
		}
		return &consumer{name: name, ks: p}
	}
	s := ksSub(sticky("x", [2]int32{0, 99}, [2]int32{200, 299}), sticky("y", [2]int32{100, 150}))
	owner := check(s, false)
	if owner[120].name != "y" || owner[160] != nil || owner[250].name != "x" || owner[65535] != nil {
		t.Fatalf("sticky owners: 120 %v, 160 %v, 250 %v", owner[120], owner[160], owner[250])
	}
}

// TestKeySharedAdmission: bad sticky ranges, overlaps (naming both
// consumers and ranges) and mixed modes are refused.
func TestKeySharedAdmission(t *testing.T) {
	st := func(name string, rs ...[2]int32) *consumer {
		p := &clientv1.KeySharedPolicy{Mode: clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY}
		for _, r := range rs {
			p.Ranges = append(p.Ranges, &clientv1.HashRange{Start: r[0], End: r[1]})
		}
		return &consumer{name: name, ks: p}
	}
	s := ksSub(st("a", [2]int32{0, 999}))
	for _, tc := range []struct {
		c    *consumer
		want string
	}{
		{st("b", [2]int32{1000, 2000}, [2]int32{500, 600}), "key_shared.ranges[1] [500, 600] of consumer b overlaps range [0, 999] of connected consumer a"},
		{st("b", [2]int32{1000, 2000}, [2]int32{1500, 1600}), "key_shared.ranges[1] [1500, 1600] overlaps key_shared.ranges[0] [1000, 2000]"},
		{st("b", [2]int32{7, 3}), "key_shared.ranges[0] [7, 3]"},
		{st("b", [2]int32{60000, 65536}), "key_shared.ranges[0] [60000, 65536]"},
		{st("b"), "STICKY mode needs at least one range"},
		{&consumer{name: "b"}, "key_shared.mode: subscription s is connected in KEY_SHARED_MODE_STICKY"},
		{&consumer{name: "b", ks: &clientv1.KeySharedPolicy{Ranges: []*clientv1.HashRange{{Start: 1, End: 2}}}}, "ranges are only for KEY_SHARED_MODE_STICKY"},
	} {
		err := s.admitKeySharedLocked(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admit %v: %v, want %q", tc.c.ks, err, tc.want)
		}
	}
	if err := s.admitKeySharedLocked(st("b", [2]int32{1000, 65535})); err != nil {
		t.Fatalf("adjacent range refused: %v", err)
	}
	if err := validateSendDispatch(&clientv1.Send{DeliverAtMs: -1}); err == nil || !strings.Contains(err.Error(), "deliver_at_ms") {
		t.Fatalf("negative deliver_at_ms: %v", err)
	}
	if err := validateSendDispatch(&clientv1.Send{BatchKey: strings.Repeat("k", 257)}); err == nil || !strings.Contains(err.Error(), "batch_key is 257 bytes, limit 256") {
		t.Fatalf("long batch_key: %v", err)
	}
}
