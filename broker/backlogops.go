package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Backlog operations: skip, clear-backlog and expire-messages (admin),
// message TTL and consumer_backlog_eviction (the topic's backlog pass,
// ttl.go). All of them acknowledge a prefix of a subscription's backlog by
// moving its mark-delete forward (ackThrough): the same state a cumulative
// acknowledgement changes, so delivery, stats, retention and — on a
// replicated subscription — the acknowledgement vector follow exactly as
// they do for a consumer's acks (the vector's translation reads the origin
// keys of the passed entries and ships them; subcover.go). They never move
// a cursor backwards and never touch a replicator cursor or a reader.

// backlogSubState is a subscription's backlog-operation counters.
type backlogSubState struct {
	expired atomic.Int64 // entries acknowledged by TTL and expire-messages
	evicted atomic.Int64 // entries acknowledged by consumer_backlog_eviction
}

// backlogTopicState is a topic's backlog pass state (ttl.go, quota.go).
type backlogTopicState struct {
	once sync.Once
	// mu guards oldest.
	mu sync.Mutex
	// oldest caches, per cursor name, the origin time of its oldest
	// unacknowledged entry (reading it once per position, not per send).
	oldest map[string]oldestEntry
}

// oldestEntry is a cached oldest unacknowledged entry of a cursor.
type oldestEntry struct {
	p  pos
	ms int64
}

// init makes the state usable (idempotent).
func (b *backlogTopicState) init() {
	b.once.Do(func() {
		b.oldest = map[string]oldestEntry{}
	})
}

// evictable reports whether backlog operations and policies may move s:
// durable subscriptions only, never a replicator cursor or a reader.
func (s *subscription) evictable() bool { return !s.nonDurable && !isReplName(s.name) }

// ackThrough acknowledges every entry up to and including target (capped at
// the last stored entry) by moving the mark-delete there, and returns how
// many entries were not acknowledged before. A target at or before the
// mark-delete changes nothing.
func (s *subscription) ackThrough(target pos) int64 {
	s.mu.Lock()
	ml := s.t.ml
	ml.mu.Lock()
	if last := ml.lastPosLocked(); ml.lessLocked(last, target) {
		target = last
	}
	if _, ok := ml.seqOf[target.L]; !ok || !ml.lessLocked(s.markDelete, target) {
		ml.mu.Unlock()
		s.mu.Unlock()
		return 0
	}
	before := ml.countAfterLocked(s.markDelete) - int64(len(s.acked))
	s.markDelete = target
	s.dropThroughLocked(target)
	s.compactLocked()
	s.dirty = true
	if b := s.blocked; b != nil && !ml.lessLocked(s.markDelete, b.p) {
		s.blocked = nil // skipped past the entry dispatch was stuck on
	}
	s.afterAckLocked()
	after := ml.countAfterLocked(s.markDelete) - int64(len(s.acked))
	ml.mu.Unlock()
	s.mu.Unlock()
	s.kick()
	return max(before-after, 0)
}

// nthUnacked returns the position of the n-th (n >= 1) entry after the
// mark-delete not individually acknowledged, or the last such entry when
// fewer are stored; ok is false when none is.
func (s *subscription) nthUnacked(n int64) (pos, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if len(s.acked) == 0 {
		// No individual acks: count whole ledgers without walking entries.
		p, found := s.markDelete, false
		left := n
		for left > 0 {
			next, ok := ml.nextLocked(p)
			if !ok {
				break
			}
			found = true
			// Jump within next's ledger.
			var cnt int64
			for i, li := range ml.rec.Ledgers {
				if li.ID == next.L {
					cnt = ml.countLocked(i)
				}
			}
			step := min(left, cnt-next.E)
			p = pos{next.L, next.E + step - 1}
			left -= step
		}
		return p, found
	}
	p, last, found := s.markDelete, pos{}, false
	for n > 0 {
		next, ok := ml.nextLocked(p)
		if !ok {
			break
		}
		p = next
		if _, acked := s.acked[next]; acked {
			continue
		}
		last, found = next, true
		n--
	}
	if found && n > 0 {
		return p, true // fewer than n: through the last stored entry
	}
	return last, found
}

// expireTarget finds the last position of the run of entries after the
// mark-delete published before cutoffMs (origin time: the origin broker's
// publish time, preserved by replication). Entries of a closed ledger
// closed before the cutoff are known older without being read; the others
// are read (at most maxReads of them per call; the TTL pass goes on at its
// next round). ok is false when the first entry is not older.
func (s *subscription) expireTarget(ctx context.Context, cutoffMs int64, maxReads int) (pos, bool, error) {
	ml := s.t.ml
	cur := s.markDeletePos()
	found := false
	reads := 0
	for reads < maxReads {
		ml.mu.Lock()
		next, ok := ml.nextLocked(cur)
		if !ok {
			ml.mu.Unlock()
			return cur, found, nil
		}
		var closedMs, cnt int64
		for i, li := range ml.rec.Ledgers {
			if li.ID == next.L {
				closedMs, cnt = li.ClosedMs, ml.countLocked(i)
				if ml.writer != nil && ml.writer.ID() == li.ID {
					closedMs = 0
				}
			}
		}
		ml.mu.Unlock()
		if closedMs > 0 && closedMs < cutoffMs && cnt > 0 {
			cur, found = pos{next.L, cnt - 1}, true
			continue
		}
		ents, err := ml.read(ctx, next, min(maxReadBatch, maxReads-reads))
		if errors.Is(err, ErrNotFound) {
			return cur, found, nil // trimmed under us: the next round starts over
		}
		if err != nil && len(ents) == 0 {
			return cur, found, err
		}
		if len(ents) == 0 {
			return cur, found, nil
		}
		reads += len(ents)
		for _, e := range ents {
			md, _, derr := wire.DecodeEntry(e.Data)
			if derr == nil && originTime(md) >= cutoffMs {
				return cur, found, nil
			}
			// Older (or undecodable, which dispatch skips anyway).
			cur, found = pos{e.LedgerID, e.EntryID}, true
		}
		if err != nil {
			return cur, found, err
		}
	}
	return cur, found, nil
}

// expire acknowledges s's entries published before cutoffMs and counts
// them as expired.
func (s *subscription) expire(ctx context.Context, cutoffMs int64, maxReads int) (int64, error) {
	target, ok, err := s.expireTarget(ctx, cutoffMs, maxReads)
	if !ok {
		return 0, err
	}
	n := s.ackThrough(target)
	s.bl.expired.Add(n)
	if m := s.t.b.metrics; m != nil && n > 0 {
		m.expiredEntries.WithLabelValues(s.t.name.NamespaceName()).Add(float64(n))
	}
	return n, err
}

// countEvicted counts n entries evicted by the quota ("size" or "age").
func (s *subscription) countEvicted(n int64, quota string) {
	if n <= 0 {
		return
	}
	s.bl.evicted.Add(n)
	if m := s.t.b.metrics; m != nil {
		m.evictedEntries.WithLabelValues(s.t.name.NamespaceName(), quota).Add(float64(n))
	}
}

// opResult is a subscription's state after an operation.
func (s *subscription) opResult(n int64) *clientv1.BacklogOpResult {
	md := s.markDeletePos()
	return &clientv1.BacklogOpResult{Subscription: s.name, AcknowledgedEntries: n,
		MarkDeletePosition: &clientv1.MessageId{LedgerId: md.L, EntryId: md.E},
		BacklogEntries:     s.backlog(), Replicated: s.isReplicated()}
}

// adminExpireReads bounds the entries one expire-messages call reads per
// subscription (entries of ledgers closed before the cutoff are not read).
const adminExpireReads = 1 << 20

// backlogOpTargets resolves an operation's subscriptions: the one named,
// or every evictable one (all).
func (a *adminService) backlogOpTargets(ctx context.Context, topicName, sub string, all bool) (*topic, clientv1.AdminClient, []*subscription, error) {
	switch {
	case all && sub != "":
		return nil, nil, nil, fmt.Errorf("%w: give subscription or all_subscriptions, not both", ErrInvalidArgument)
	case !all:
		if err := ValidateName("subscription", sub); err != nil {
			return nil, nil, nil, err
		}
	}
	t, fwd, err := a.owned(ctx, topicName, false)
	if fwd != nil || err != nil {
		return nil, fwd, nil, err
	}
	if all {
		var subs []*subscription
		for _, s := range t.subList() {
			if s.evictable() {
				subs = append(subs, s)
			}
		}
		sort.Slice(subs, func(i, j int) bool { return subs[i].name < subs[j].name })
		return t, nil, subs, nil
	}
	s, err := t.subscription(sub)
	if err != nil {
		return nil, nil, nil, err
	}
	if !s.evictable() {
		return nil, nil, nil, fmt.Errorf("%w: %s is a replicator cursor or a reader; backlog operations apply to subscriptions", ErrNotAllowed, sub)
	}
	return t, nil, []*subscription{s}, nil
}

// finishOp persists the moved cursors and builds the response.
func finishOp(ctx context.Context, op string, subs []*subscription, counts []int64) (*clientv1.BacklogOpResponse, error) {
	resp := &clientv1.BacklogOpResponse{}
	for i, s := range subs {
		if counts[i] > 0 {
			s.log.Info("backlog operation", "op", op, "acknowledged_entries", counts[i])
		}
		if err := s.persist(ctx, true); err != nil {
			return nil, fmt.Errorf("%w: %s applied in memory on subscription %s; persisting its cursor failed: %v", ErrUnavailable, op, s.name, err)
		}
		resp.Subscriptions = append(resp.Subscriptions, s.opResult(counts[i]))
	}
	return resp, nil
}

// SkipMessages acknowledges the next r.entries unacknowledged entries.
func (a *adminService) SkipMessages(ctx context.Context, r *clientv1.SkipMessagesRequest) (*clientv1.BacklogOpResponse, error) {
	if r.GetEntries() < 1 {
		return nil, GRPCError(fmt.Errorf("%w: entries %d must be >= 1", ErrInvalidArgument, r.GetEntries()))
	}
	_, fwd, subs, err := a.backlogOpTargets(ctx, r.GetTopic(), r.GetSubscription(), r.GetAllSubscriptions())
	if fwd != nil {
		return fwd.SkipMessages(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	counts := make([]int64, len(subs))
	for i, s := range subs {
		if p, ok := s.nthUnacked(r.GetEntries()); ok {
			counts[i] = s.ackThrough(p)
		}
	}
	resp, err := finishOp(ctx, "skip", subs, counts)
	return resp, GRPCError(err)
}

// ClearBacklog acknowledges everything stored.
func (a *adminService) ClearBacklog(ctx context.Context, r *clientv1.ClearBacklogRequest) (*clientv1.BacklogOpResponse, error) {
	t, fwd, subs, err := a.backlogOpTargets(ctx, r.GetTopic(), r.GetSubscription(), r.GetAllSubscriptions())
	if fwd != nil {
		return fwd.ClearBacklog(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	t.ml.mu.Lock()
	last := t.ml.lastPosLocked()
	t.ml.mu.Unlock()
	counts := make([]int64, len(subs))
	for i, s := range subs {
		counts[i] = s.ackThrough(last)
	}
	resp, err := finishOp(ctx, "clear-backlog", subs, counts)
	return resp, GRPCError(err)
}

// ExpireMessages acknowledges the entries published more than
// r.expire_time_seconds ago.
func (a *adminService) ExpireMessages(ctx context.Context, r *clientv1.ExpireMessagesRequest) (*clientv1.BacklogOpResponse, error) {
	const maxSeconds = 100 * 365 * 24 * 3600
	if r.GetExpireTimeSeconds() < 0 || r.GetExpireTimeSeconds() > maxSeconds {
		return nil, GRPCError(fmt.Errorf("%w: expire_time_seconds %d must be in [0, %d]", ErrInvalidArgument, r.GetExpireTimeSeconds(), maxSeconds))
	}
	_, fwd, subs, err := a.backlogOpTargets(ctx, r.GetTopic(), r.GetSubscription(), r.GetAllSubscriptions())
	if fwd != nil {
		return fwd.ExpireMessages(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	cutoff := time.Now().UnixMilli() - r.GetExpireTimeSeconds()*1000
	counts := make([]int64, len(subs))
	for i, s := range subs {
		n, err := s.expire(ctx, cutoff, adminExpireReads)
		counts[i] = n
		if err != nil {
			return nil, GRPCError(fmt.Errorf("expire-messages on subscription %s (%d entries expired before the error): %w", s.name, n, err))
		}
	}
	resp, err := finishOp(ctx, "expire-messages", subs, counts)
	return resp, GRPCError(err)
}
