package broker

import (
	"container/heap"
	"time"
)

// Delayed delivery (see docs/semantics/dispatch.md).
//
// An entry whose EntryMetadata.deliver_at_ms is in the future (by this
// broker's clock) is not delivered when dispatch reads it: dispatch records
// (position, time) in the subscription's delayed index and reads on. A
// timer wakes the dispatcher at the earliest time; due entries move to the
// replay set and go out oldest first. Nothing is persisted: an entry held
// back is not acknowledged, so the mark-delete position stays before it,
// and a broker that loads the topic (restart, kill -9, move) re-reads from
// the mark-delete and finds the time in the entry again — durable by
// construction. The index is bounded (Config.MaxDelayedEntries): past it
// dispatch stops reading ahead until entries are due.

// defaultMaxDelayed is Config.MaxDelayedEntries' default.
const defaultMaxDelayed = 100000

// delayIndex is a subscription's delayed entries; guarded by
// subscription.mu.
type delayIndex struct {
	at    map[pos]int64 // deliver time (Unix ms) of each held entry
	h     delayHeap
	timer *time.Timer
	armed int64 // the time the timer is set for (0: none)
}

type delayItem struct {
	p  pos
	at int64
}

// delayHeap orders held entries by time, then position.
type delayHeap []delayItem

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].p.L < h[j].p.L || h[i].p.L == h[j].p.L && h[i].p.E < h[j].p.E
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(delayItem)) }
func (h *delayHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// delayedDeliveryEnabled reads the effective policy (unset = on).
func (t *topic) delayedDeliveryEnabled() bool {
	pol := t.currentPolicies()
	return pol == nil || pol.DelayedDeliveryEnabled == nil || pol.GetDelayedDeliveryEnabled()
}

// maxDelayedLocked is the delayed index's bound.
func (s *subscription) maxDelayedLocked() int {
	if n := s.t.b.cfg.MaxDelayedEntries; n > 0 {
		return n
	}
	return defaultMaxDelayed
}

// holdLocked records a delayed entry.
func (s *subscription) holdLocked(p pos, at int64) {
	if s.delay.at == nil {
		s.delay.at = map[pos]int64{}
	}
	if _, ok := s.delay.at[p]; ok {
		return
	}
	s.delay.at[p] = at
	heap.Push(&s.delay.h, delayItem{p: p, at: at})
}

// matureDelayedLocked moves the held entries that are due (all of them
// when delayed delivery is off) to the replay set, dropping those
// acknowledged meanwhile, and arms the timer for the next one. Needs s.mu.
func (s *subscription) matureDelayedLocked(enabled bool) {
	if len(s.delay.h) == 0 {
		return
	}
	now := time.Now().UnixMilli()
	ml := s.t.ml
	ml.mu.Lock()
	for len(s.delay.h) > 0 && (!enabled || s.delay.h[0].at <= now) {
		it := heap.Pop(&s.delay.h).(delayItem)
		if at, ok := s.delay.at[it.p]; !ok || at != it.at {
			continue // dropped by a reset
		}
		delete(s.delay.at, it.p)
		if _, acked := s.acked[it.p]; acked || !ml.lessLocked(s.markDelete, it.p) {
			continue // acknowledged meanwhile (skip, clear-backlog, cover)
		}
		s.setAsideLocked(it.p)
	}
	ml.mu.Unlock()
	s.armDelayTimerLocked()
}

// armDelayTimerLocked wakes the dispatcher when the earliest held entry
// is due.
func (s *subscription) armDelayTimerLocked() {
	if len(s.delay.h) == 0 {
		return
	}
	next := s.delay.h[0].at
	if s.delay.armed == next && s.delay.timer != nil {
		return
	}
	if s.delay.timer != nil {
		s.delay.timer.Stop()
	}
	s.delay.armed = next
	// A millisecond late rather than early: the entry is due at next.
	d := time.Until(time.UnixMilli(next)) + time.Millisecond
	s.delay.timer = time.AfterFunc(max(d, 0), s.kick)
}

// resetDispatchLocked forgets the held entries (the cursor moved: they are
// read again, and held again, from the new position).
func (s *subscription) resetDispatchLocked() {
	s.delay.at = nil
	s.delay.h = nil
	if s.delay.timer != nil {
		s.delay.timer.Stop()
		s.delay.timer = nil
	}
	s.delay.armed = 0
	s.ks.fresh = nil
}
