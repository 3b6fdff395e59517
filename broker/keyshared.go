package broker

import (
	"fmt"
	"sort"
	"strconv"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Key_Shared dispatch (see docs/semantics/dispatch.md).
//
// Every entry is routed by the slot of its batch key (wire.KeySlot of
// EntryMetadata.batch_key: the client never batches two keys together).
// The slot's owner is the consumer whose sticky range holds it (STICKY) or
// the first point at or after it on a ring where every consumer has
// ringPointsPerConsumer points (AUTO_SPLIT: consistent hashing, so a join
// or a leave moves only the joining or leaving consumer's share).
//
// Order per key is kept by three rules, all under subscription.mu:
//   - draining: an entry of slot h goes to consumer c only when no entry of
//     h is delivered and unacknowledged on another consumer (Pulsar 4's
//     "draining hashes", PIP-379, which replaced the "recently joined
//     consumers" read-position rule: it holds back only the keys that
//     moved, not every key of the joining consumer). allow_out_of_order
//     lifts it for that consumer.
//   - set-aside: an entry that cannot go now (no permit, draining, no owner)
//     joins the replay set (subscription.redeliver); dispatch goes on with
//     other keys, so a stuck key never blocks the others.
//   - never overtake: an entry of a slot that has entries in the replay set
//     is set aside too, and the replay set is served oldest first.
// The replay set is bounded (Config.MaxSetAsideEntries): past it dispatch
// stops reading new entries.

// ringPointsPerConsumer is how many points each AUTO_SPLIT consumer has on
// the ring: with 100 the largest share is within a few tens of percent of
// the mean for a handful of consumers, and a rebuild stays cheap.
const ringPointsPerConsumer = 100

// maxStickyRanges bounds the ranges one STICKY consumer may name.
const maxStickyRanges = 1024

// defaultMaxSetAside is Config.MaxSetAsideEntries' default.
const defaultMaxSetAside = 10000

// ringPoint is one AUTO_SPLIT point: slots up to and including slot (after
// the previous point) belong to c.
type ringPoint struct {
	slot int32
	c    *consumer
}

// keySharedState is a subscription's Key_Shared state; guarded by
// subscription.mu.
type keySharedState struct {
	// mode is the mode of the connected consumers (set by the first one).
	mode clientv1.KeySharedMode
	// ring holds the AUTO_SPLIT points, sorted by slot then consumer name.
	ring []ringPoint
	// slots remembers the key slot of entries that are delivered and
	// unacknowledged, set aside or delayed, so that dispatch routes them
	// and applies the draining rule without reading them again. Pruned
	// (pruneLocked) when it outgrows what it can describe.
	slots map[pos]int32
	// fresh marks set-aside entries never delivered: their redelivery
	// count stays 0 when they go out.
	fresh map[pos]struct{}
}

// multiHolder marks a slot held by entries pending on several consumers.
var multiHolder = &consumer{name: "(several)"}

// isKeySharedLocked reports whether the subscription dispatches Key_Shared.
func (s *subscription) isKeySharedLocked() bool {
	return s.typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_KEY_SHARED
}

// sharedLikeLocked reports whether every consumer receives (Shared and
// Key_Shared), as opposed to one active consumer (Exclusive, Failover).
func (s *subscription) sharedLikeLocked() bool {
	return s.typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED || s.isKeySharedLocked()
}

// validateKeySharedPolicy checks one consumer's policy on its own.
func validateKeySharedPolicy(p *clientv1.KeySharedPolicy) error {
	if p == nil {
		return nil
	}
	switch p.GetMode() {
	case clientv1.KeySharedMode_KEY_SHARED_MODE_AUTO_SPLIT:
		if len(p.GetRanges()) > 0 {
			return fmt.Errorf("%w: key_shared.ranges: %d ranges given, but ranges are only for KEY_SHARED_MODE_STICKY (auto split assigns slots itself)", ErrInvalidArgument, len(p.GetRanges()))
		}
		return nil
	case clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY:
	default:
		return fmt.Errorf("%w: key_shared.mode %d is not AUTO_SPLIT or STICKY", ErrInvalidArgument, p.GetMode())
	}
	rs := p.GetRanges()
	if len(rs) == 0 {
		return fmt.Errorf("%w: key_shared.ranges: STICKY mode needs at least one range of slots in [0, %d]", ErrInvalidArgument, wire.KeySlots-1)
	}
	if len(rs) > maxStickyRanges {
		return fmt.Errorf("%w: key_shared.ranges: %d ranges, limit %d", ErrInvalidArgument, len(rs), maxStickyRanges)
	}
	for i, r := range rs {
		if r.GetStart() < 0 || r.GetEnd() >= wire.KeySlots || r.GetStart() > r.GetEnd() {
			return fmt.Errorf("%w: key_shared.ranges[%d] [%d, %d]: want 0 <= start <= end <= %d", ErrInvalidArgument, i, r.GetStart(), r.GetEnd(), wire.KeySlots-1)
		}
		for j := range i {
			o := rs[j]
			if r.GetStart() <= o.GetEnd() && o.GetStart() <= r.GetEnd() {
				return fmt.Errorf("%w: key_shared.ranges[%d] [%d, %d] overlaps key_shared.ranges[%d] [%d, %d] of the same consumer", ErrInvalidArgument, i, r.GetStart(), r.GetEnd(), j, o.GetStart(), o.GetEnd())
			}
		}
	}
	return nil
}

// admitKeySharedLocked checks that c may join the connected Key_Shared
// consumers: the same mode, and (STICKY) no range overlapping another
// consumer's. The error names both consumers and both ranges.
func (s *subscription) admitKeySharedLocked(c *consumer) error {
	if err := validateKeySharedPolicy(c.ks); err != nil {
		return err
	}
	mode := c.ks.GetMode()
	if len(s.consumers) > 0 && s.ks.mode != mode {
		return fmt.Errorf("%w: key_shared.mode: subscription %s is connected in %s, consumer %s asks for %s", ErrInvalidArgument, s.name, s.ks.mode, c.name, mode)
	}
	if mode != clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY {
		return nil
	}
	for i, r := range c.ks.GetRanges() {
		for _, o := range s.consumers {
			for _, or := range o.ks.GetRanges() {
				if r.GetStart() <= or.GetEnd() && or.GetStart() <= r.GetEnd() {
					return fmt.Errorf("%w: key_shared.ranges[%d] [%d, %d] of consumer %s overlaps range [%d, %d] of connected consumer %s on subscription %s",
						ErrInvalidArgument, i, r.GetStart(), r.GetEnd(), c.name, or.GetStart(), or.GetEnd(), o.name, s.name)
				}
			}
		}
	}
	return nil
}

// rebuildKeySharedLocked recomputes the ring after a join or a leave.
func (s *subscription) rebuildKeySharedLocked() {
	if !s.isKeySharedLocked() {
		return
	}
	if len(s.consumers) > 0 {
		s.ks.mode = s.consumers[0].ks.GetMode()
	}
	s.ks.ring = s.ks.ring[:0]
	if s.ks.mode != clientv1.KeySharedMode_KEY_SHARED_MODE_AUTO_SPLIT {
		return
	}
	for _, c := range s.consumers {
		for i := range ringPointsPerConsumer {
			s.ks.ring = append(s.ks.ring, ringPoint{slot: wire.KeySlot(c.name + "#" + strconv.Itoa(i)), c: c})
		}
	}
	sort.Slice(s.ks.ring, func(i, j int) bool {
		a, b := s.ks.ring[i], s.ks.ring[j]
		return a.slot < b.slot || a.slot == b.slot && a.c.name < b.c.name
	})
}

// ownerLocked returns the consumer that owns slot (nil: none covers it).
func (s *subscription) ownerLocked(slot int32) *consumer {
	if s.ks.mode == clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY {
		for _, c := range s.consumers {
			for _, r := range c.ks.GetRanges() {
				if r.GetStart() <= slot && slot <= r.GetEnd() {
					return c
				}
			}
		}
		return nil
	}
	ring := s.ks.ring
	if len(ring) == 0 {
		return nil
	}
	i := sort.Search(len(ring), func(i int) bool { return ring[i].slot >= slot })
	if i == len(ring) {
		i = 0 // wrap around
	}
	return ring[i].c
}

// rangesOfLocked lists the slots c owns, as inclusive ranges (stats).
func (s *subscription) rangesOfLocked(c *consumer) []*clientv1.HashRange {
	if s.ks.mode == clientv1.KeySharedMode_KEY_SHARED_MODE_STICKY {
		return c.ks.GetRanges()
	}
	ring := s.ks.ring
	var out []*clientv1.HashRange
	add := func(lo, hi int32) {
		if lo > hi {
			return
		}
		if n := len(out); n > 0 && out[n-1].End+1 == lo {
			out[n-1].End = hi
			return
		}
		out = append(out, &clientv1.HashRange{Start: lo, End: hi})
	}
	for i, p := range ring {
		if p.c != c {
			continue
		}
		if i == 0 {
			// The first point also owns the wrap-around: after the last
			// point up to the end of the space.
			add(0, p.slot)
			continue
		}
		add(ring[i-1].slot+1, p.slot)
	}
	if n := len(ring); n > 0 && ring[0].c == c && ring[n-1].slot < wire.KeySlots-1 {
		add(ring[n-1].slot+1, wire.KeySlots-1)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// slotOfLocked returns (and remembers) the key slot of e.
func (s *subscription) slotOfLocked(e LedgerEntry, md *clientv1.EntryMetadata) int32 {
	p := pos{e.LedgerID, e.EntryID}
	if slot, ok := s.ks.slots[p]; ok {
		return slot
	}
	if md == nil {
		md, _, _ = wire.DecodeEntry(e.Data) // undecodable: key "" (deliverLocked skips it)
	}
	slot := wire.KeySlot(md.GetBatchKey())
	if s.ks.slots == nil {
		s.ks.slots = map[pos]int32{}
	}
	s.ks.slots[p] = slot
	return slot
}

// slotHoldersLocked maps each slot with delivered, unacknowledged entries
// to the consumer holding them (multiHolder when several do).
func (s *subscription) slotHoldersLocked() map[int32]*consumer {
	h := make(map[int32]*consumer)
	for p, c := range s.pending {
		slot, ok := s.ks.slots[p]
		if !ok {
			continue
		}
		if o, ok := h[slot]; ok && o != c {
			h[slot] = multiHolder
		} else {
			h[slot] = c
		}
	}
	return h
}

// ksRound is the state of one Key_Shared dispatch round.
type ksRound struct {
	holders map[int32]*consumer
	// used counts the permits promised to each consumer this round.
	used map[*consumer]int64
	// blocked marks slots with an entry that could not go this round:
	// later entries of the slot must not overtake it.
	blocked map[int32]bool
}

func (s *subscription) newKSRoundLocked() *ksRound {
	return &ksRound{holders: s.slotHoldersLocked(), used: map[*consumer]int64{}, blocked: map[int32]bool{}}
}

// routeLocked returns the consumer that may take an entry of slot now, or
// nil (the entry is set aside, and slot blocked for the rest of the round).
func (s *subscription) routeLocked(r *ksRound, slot int32) *consumer {
	if r.blocked[slot] {
		return nil
	}
	c := s.ownerLocked(slot)
	limit := int64(s.t.b.cfg.MaxUnackedPerConsumer)
	ok := c != nil && c.permits-r.used[c] > 0 && c.pending+r.used[c] < limit && s.hasRoomLocked(c)
	if ok && !c.ks.GetAllowOutOfOrder() {
		if h, held := r.holders[slot]; held && h != c {
			ok = false // draining: entries of the key are unacknowledged elsewhere
		}
	}
	if !ok {
		r.blocked[slot] = true
		return nil
	}
	return c
}

// delivered records that c took an entry of slot this round.
func (r *ksRound) delivered(c *consumer, slot int32) {
	if h, ok := r.holders[slot]; ok && h != c {
		r.holders[slot] = multiHolder
	} else {
		r.holders[slot] = c
	}
}

// maxSetAsideLocked is the replay set's bound.
func (s *subscription) maxSetAsideLocked() int {
	if n := s.t.b.cfg.MaxSetAsideEntries; n > 0 {
		return n
	}
	return defaultMaxSetAside
}

// pruneKeySharedLocked drops remembered slots of entries that are neither
// pending, set aside nor delayed (acknowledged since), once the maps have
// grown well past what they describe: amortized O(1) per entry.
func (s *subscription) pruneKeySharedLocked() {
	live := len(s.pending) + len(s.redeliver) + len(s.delay.at)
	if len(s.ks.slots) > 2*live+1024 {
		for p := range s.ks.slots {
			_, a := s.pending[p]
			_, b := s.redeliver[p]
			_, d := s.delay.at[p]
			if !a && !b && !d {
				delete(s.ks.slots, p)
			}
		}
	}
	if len(s.ks.fresh) > 2*len(s.redeliver)+1024 {
		for p := range s.ks.fresh {
			if _, ok := s.redeliver[p]; !ok {
				delete(s.ks.fresh, p)
			}
		}
	}
}

// setAsideLocked puts an entry that was read but not delivered into the
// replay set.
func (s *subscription) setAsideLocked(p pos) {
	s.redeliver[p] = struct{}{}
	if s.ks.fresh == nil {
		s.ks.fresh = map[pos]struct{}{}
	}
	s.ks.fresh[p] = struct{}{}
}

// dispatchStatsLocked fills the Key_Shared and delayed-delivery stats.
func (s *subscription) dispatchStatsLocked(ss *clientv1.SubscriptionStats) {
	ss.DelayedEntries = int64(len(s.delay.at))
	ss.SetAsideEntries = int64(len(s.redeliver))
	if !s.isKeySharedLocked() {
		return
	}
	for p := range s.redeliver {
		if slot, ok := s.ks.slots[p]; ok && s.ownerLocked(slot) == nil {
			ss.UncoveredEntries++
		}
	}
	for _, cs := range ss.Consumers {
		for _, c := range s.consumers {
			if c.name == cs.GetConsumerName() {
				cs.KeyHashRanges = s.rangesOfLocked(c)
				cs.AllowOutOfOrder = c.ks.GetAllowOutOfOrder()
			}
		}
	}
}

// maxBatchKeyBytes bounds Send.batch_key (as the consumer name).
const maxBatchKeyBytes = 256

// validateSendDispatch checks the dispatch fields of a send.
func validateSendDispatch(sd *clientv1.Send) error {
	if at := sd.GetDeliverAtMs(); at < 0 {
		return fmt.Errorf("%w: deliver_at_ms %d must be >= 0 (Unix ms; 0 = at once)", ErrInvalidArgument, at)
	}
	if n := len(sd.GetBatchKey()); n > maxBatchKeyBytes {
		return fmt.Errorf("%w: batch_key is %d bytes, limit %d", ErrInvalidArgument, n, maxBatchKeyBytes)
	}
	return nil
}
