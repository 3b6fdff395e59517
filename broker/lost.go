package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
)

// A subscription whose next entry cannot be read stops there: delivering
// later entries first would break the order consumers rely on, and
// acknowledging the entry silently would drop a message. The stop is
// visible instead: the subscription's stats carry the blocked position and
// the reason, the broker logs it at a bounded rate, and an operator can
// skip the entry (or its whole ledger) with SkipLostEntries.

// Retry and logging bounds of a blocked dispatch.
const (
	// blockedRetryMin/Max bound the backoff between reads of an entry that
	// failed: short at first (a bookie restart or a network blip heals
	// quickly), then slow, so that a lost entry, which never heals by
	// itself, costs its replicas a read every few seconds only.
	blockedRetryMin = 200 * time.Millisecond
	blockedRetryMax = 5 * time.Second
	// blockedLogEvery is how often a still-blocked subscription repeats its
	// warning (the first failure is always logged).
	blockedLogEvery = time.Minute
)

// blockedRead is the entry a subscription's dispatch cannot read.
type blockedRead struct {
	p        pos
	reason   string
	lost     bool // every replica said missing or corrupt
	since    time.Time
	attempts int64
	logged   time.Time
}

// isLostEntry reports whether a read error says that no replica holds the
// entry intact (as opposed to replicas that could not be asked).
func isLostEntry(err error) bool {
	return errors.Is(err, ledger.ErrNoSuchEntry) || errors.Is(err, ledger.ErrEntryCorrupt)
}

// readBlocked records that dispatch could not read p and returns err.
func (s *subscription) readBlocked(p pos, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	b := s.blocked
	if b == nil || b.p != p {
		b = &blockedRead{p: p, since: now}
		s.blocked = b
	}
	b.attempts++
	b.reason = err.Error()
	b.lost = isLostEntry(err)
	if b.logged.IsZero() || now.Sub(b.logged) >= blockedLogEvery {
		b.logged = now
		s.log.Warn("dispatch blocked: cannot read the next entry; later entries wait behind it",
			"ledger", p.L, "entry", p.E, "lost", b.lost, "attempts", b.attempts,
			"blocked_for", now.Sub(b.since).Round(time.Millisecond), "err", err,
			"hint", "if the entry is lost for good: meridian admin topics skip-lost")
	}
	return err
}

// dispatchFailed is called by the dispatch loop after a failed round; it
// returns how long to wait before the next one. Failures other than a
// blocked read (recorded by readBlocked) are logged here, as before.
func (s *subscription) dispatchFailed(err error) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocked == nil {
		s.log.Warn("dispatch", "err", err)
		return blockedRetryMin
	}
	d := blockedRetryMin << min(s.blocked.attempts-1, 10)
	return min(d, blockedRetryMax)
}

// readProgressedLocked clears the blocked state once dispatch read the
// blocked entry or the cursor moved past it (a skip, an ack or a reset).
// Needs s.mu held.
func (s *subscription) readProgressedLocked(e LedgerEntry) {
	b := s.blocked
	if b == nil {
		return
	}
	p := pos{e.LedgerID, e.EntryID}
	ml := s.t.ml
	ml.mu.Lock()
	_, acked := s.acked[b.p]
	passed := acked || !ml.lessLocked(s.markDelete, b.p) || ml.lessLocked(b.p, p)
	ml.mu.Unlock()
	if p == b.p || passed {
		s.log.Info("dispatch resumed", "ledger", b.p.L, "entry", b.p.E, "attempts", b.attempts,
			"blocked_for", time.Since(b.since).Round(time.Millisecond), "skipped", passed && p != b.p)
		s.blocked = nil
	}
}

// nextToReadLocked returns the first position after lastRead that is
// stored and neither at or before mark-delete nor individually
// acknowledged, moving lastRead over the ones it passes: an entry skipped
// as lost is acknowledged and must not be read again. Needs s.mu and
// ml.mu held.
func (s *subscription) nextToReadLocked() (pos, bool) {
	ml := s.t.ml
	for {
		next, ok := ml.nextLocked(s.lastRead)
		if !ok {
			return next, false
		}
		if _, acked := s.acked[next]; !acked && ml.lessLocked(s.markDelete, next) {
			return next, true
		}
		s.lastRead = next
	}
}

// blockedStatsLocked returns the blocked state for the stats (nil if not
// blocked). Needs s.mu held.
func (s *subscription) blockedStatsLocked() *clientv1.BlockedRead {
	b := s.blocked
	if b == nil {
		return nil
	}
	return &clientv1.BlockedRead{
		Position: &clientv1.MessageId{LedgerId: b.p.L, EntryId: b.p.E},
		Reason:   b.reason, Lost: b.lost, SinceMs: b.since.UnixMilli(), Attempts: b.attempts,
	}
}

// skipLost acknowledges positions (already-acknowledged ones are left
// alone) and returns how many it acknowledged.
func (s *subscription) skipLost(ps []pos) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	var n int64
	for _, p := range ps {
		if _, ok := s.acked[p]; ok || !ml.lessLocked(s.markDelete, p) {
			continue
		}
		s.acked[p] = struct{}{}
		if c, ok := s.pending[p]; ok {
			delete(s.pending, p)
			c.pending--
		}
		delete(s.redeliver, p)
		delete(s.redelivers, p)
		n++
	}
	s.compactLocked()
	s.dirty = true
	if b := s.blocked; b != nil {
		if _, ok := s.acked[b.p]; ok || !ml.lessLocked(s.markDelete, b.p) {
			s.log.Info("dispatch resumed", "ledger", b.p.L, "entry", b.p.E, "attempts", b.attempts,
				"blocked_for", time.Since(b.since).Round(time.Millisecond), "skipped", true)
			s.blocked = nil
		}
	}
	ml.mu.Unlock()
	s.kick()
	return n
}

// unackedLocked counts the positions of ps the subscription has not
// acknowledged. Needs s.mu and ml.mu held.
func (s *subscription) unackedLocked(ps []pos) int64 {
	ml := s.t.ml
	var n int64
	for _, p := range ps {
		if _, ok := s.acked[p]; !ok && ml.lessLocked(s.markDelete, p) {
			n++
		}
	}
	return n
}

// maxSkipEntries bounds one SkipLostEntries call (individual acks are held
// in memory and in the cursor).
const maxSkipEntries = 1 << 20

// SkipLostEntries acknowledges an unreadable entry, or every entry of a
// ledger, on one subscription; without confirm it only says what it would
// do.
func (a *adminService) SkipLostEntries(ctx context.Context, r *clientv1.SkipLostEntriesRequest) (*clientv1.SkipLostEntriesResponse, error) {
	if err := ValidateName("subscription", r.GetSubscription()); err != nil {
		return nil, GRPCError(err)
	}
	if r.GetTarget() == nil {
		return nil, GRPCError(fmt.Errorf("%w: target is unset: give entry (ledger:entry) or ledger_id", ErrInvalidArgument))
	}
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.SkipLostEntries(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	s, err := t.subscription(r.GetSubscription())
	if err != nil {
		return nil, GRPCError(err)
	}
	ml := t.ml
	var (
		ps   []pos
		what string
	)
	switch tg := r.GetTarget().(type) {
	case *clientv1.SkipLostEntriesRequest_Entry:
		p := pos{tg.Entry.GetLedgerId(), tg.Entry.GetEntryId()}
		ml.mu.Lock()
		_, retained := ml.seqOf[p.L]
		stored := retained && p.E >= 0 && !ml.lessLocked(ml.lastPosLocked(), p)
		ml.mu.Unlock()
		if !stored {
			return nil, GRPCError(fmt.Errorf("%w: entry %d:%d is not a stored entry of %s", ErrInvalidArgument, p.L, p.E, t.name))
		}
		ents, rerr := ml.read(ctx, p, 1)
		if rerr == nil && len(ents) == 1 {
			return nil, GRPCError(fmt.Errorf("%w: entry %d:%d of %s is readable: nothing to skip", ErrNotAllowed, p.L, p.E, t.name))
		}
		if rerr == nil {
			rerr = errors.New("no entry returned")
		}
		ps = []pos{p}
		what = fmt.Sprintf("entry %d:%d (read error: %v)", p.L, p.E, rerr)
	case *clientv1.SkipLostEntriesRequest_LedgerId:
		id := tg.LedgerId
		ml.mu.Lock()
		idx := -1
		for i, li := range ml.rec.Ledgers {
			if li.ID == id {
				idx = i
			}
		}
		var n int64
		open := false
		if idx >= 0 {
			n = ml.countLocked(idx)
			open = ml.writer != nil && ml.writer.ID() == id
		}
		ml.mu.Unlock()
		switch {
		case idx < 0:
			return nil, GRPCError(fmt.Errorf("%w: ledger_id %d is not a retained ledger of %s", ErrInvalidArgument, id, t.name))
		case open:
			return nil, GRPCError(fmt.Errorf("%w: ledger %d is the open ledger of %s; unload the topic first", ErrNotAllowed, id, t.name))
		case n > maxSkipEntries:
			return nil, GRPCError(fmt.Errorf("%w: ledger %d has %d entries, more than the %d one skip may acknowledge", ErrInvalidArgument, id, n, maxSkipEntries))
		}
		for e := range n {
			ps = append(ps, pos{id, e})
		}
		what = fmt.Sprintf("ledger %d (entries 0..%d)", id, n-1)
	}
	s.mu.Lock()
	ml.mu.Lock()
	todo := s.unackedLocked(ps)
	ml.mu.Unlock()
	s.mu.Unlock()
	desc := fmt.Sprintf("acknowledge %d not yet acknowledged entries of %s on subscription %s of %s; their messages are never delivered to it",
		todo, what, s.name, t.name)
	if !r.GetConfirm() {
		return &clientv1.SkipLostEntriesResponse{Entries: todo, Description: "would " + desc}, nil
	}
	n := s.skipLost(ps)
	s.log.Warn("lost entries skipped by an operator", "target", what, "acknowledged", n)
	if err := s.persist(ctx, true); err != nil {
		return nil, GRPCError(fmt.Errorf("%w: skipped in memory, persisting the cursor failed: %v", ErrUnavailable, err))
	}
	return &clientv1.SkipLostEntriesResponse{Entries: n, Description: desc, Applied: true}, nil
}
