package broker

import (
	"context"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// quotaPollInterval is how often a held send re-checks the backlog quota.
const quotaPollInterval = 25 * time.Millisecond

// bytesAfterLocked estimates the bytes stored strictly after p: whole
// ledgers after p's ledger, and of p's ledger the share of its entries
// after p (its size times the fraction of entries left; entry sizes are not
// tracked one by one).
func (ml *managedLedger) bytesAfterLocked(p pos) int64 {
	s, e := ml.keyLocked(p)
	var total int64
	for i, li := range ml.rec.Ledgers {
		n := ml.countLocked(i)
		size := li.Size
		if ml.writer != nil && li.ID == ml.writer.ID() {
			size = ml.curSize
		}
		switch {
		case li.Seq < s:
		case li.Seq == s:
			if rest := n - (e + 1); n > 0 && rest > 0 {
				total += size * rest / n
			}
		default:
			total += size
		}
	}
	return total
}

// backlogBytes returns the largest backlog in bytes of any cursor of the
// topic (subscriptions and replicators alike: a replicator's cursor
// meridian.repl.<region> is an ordinary cursor), counted from its
// mark-delete position, and the cursor's name.
func (t *topic) backlogBytes() (int64, string) {
	subs := t.subList()
	var most int64
	var name string
	for _, s := range subs {
		if s.nonDurable {
			continue // a reader's backlog holds no quota
		}
		md := s.markDeletePos()
		t.ml.mu.Lock()
		b := t.ml.bytesAfterLocked(md)
		t.ml.mu.Unlock()
		if b > most || name == "" {
			most, name = b, s.name
		}
	}
	return most, name
}

// backlogQuota returns the topic's backlog quota in bytes and its action;
// ok is false when the effective policy sets none (unset or -1).
func (t *topic) backlogQuota() (limit int64, action clientv1.QuotaAction, ok bool) {
	pol := t.currentPolicies()
	if pol == nil || pol.BacklogQuotaBytes == nil || pol.GetBacklogQuotaBytes() < 0 {
		return 0, pol.GetBacklogQuotaAction(), false
	}
	return pol.GetBacklogQuotaBytes(), pol.GetBacklogQuotaAction(), true
}

// backlogAgeQuota returns the topic's backlog age quota; ok is false when
// the effective policy sets none (unset or -1).
func (t *topic) backlogAgeQuota() (limit time.Duration, ok bool) {
	pol := t.currentPolicies()
	if pol == nil || pol.BacklogQuotaAgeSeconds == nil || pol.GetBacklogQuotaAgeSeconds() < 0 {
		return 0, false
	}
	return time.Duration(pol.GetBacklogQuotaAgeSeconds()) * time.Second, true
}

// quotaErr returns an ErrQuotaExceeded error naming the quota and the
// current backlog when the topic's backlog is past its size or age quota,
// else nil. With consumer_backlog_eviction nothing is refused: it asks the
// backlog pass (ttl.go) to evict instead.
func (t *topic) quotaErr() error {
	err := t.quotaExceeded()
	if err == nil {
		return nil
	}
	if _, action, _ := t.backlogQuota(); action == clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION {
		t.kickBacklog()
		return nil
	}
	return err
}

// quotaExceeded is quotaErr whatever the action.
func (t *topic) quotaExceeded() error {
	if limit, _, ok := t.backlogQuota(); ok {
		backlog, cursor := t.backlogBytes()
		if backlog > limit {
			return fmt.Errorf("%w: backlog_quota_bytes %d of %s exceeded: cursor %s has a backlog of %d bytes; retry once consumers catch up",
				ErrQuotaExceeded, limit, t.name, cursor, backlog)
		}
	}
	if limit, ok := t.backlogAgeQuota(); ok {
		ctx, cancel := context.WithTimeout(context.Background(), t.b.cfg.OperationTimeout)
		defer cancel()
		age, cursor := t.oldestBacklog(ctx)
		if age > limit {
			return fmt.Errorf("%w: backlog_quota_age_seconds %d of %s exceeded: cursor %s has an unacknowledged entry %s old; retry once consumers catch up",
				ErrQuotaExceeded, int64(limit/time.Second), t.name, cursor, age.Round(time.Second))
		}
	}
	return nil
}

// firstUnackedLocked returns the first entry after the mark-delete not
// individually acknowledged. Needs s.mu and ml.mu.
func (s *subscription) firstUnackedLocked() (pos, bool) {
	ml := s.t.ml
	p := s.markDelete
	for {
		n, ok := ml.nextLocked(p)
		if !ok {
			return pos{}, false
		}
		if _, acked := s.acked[n]; !acked {
			return n, true
		}
		p = n
	}
}

// oldestBacklog returns the age of the oldest unacknowledged entry of any
// durable cursor (subscriptions and replicators; origin publish time) and
// the cursor's name; 0 when every cursor is caught up. Each cursor's oldest
// entry is read once per position (cached), not on every send.
func (t *topic) oldestBacklog(ctx context.Context) (time.Duration, string) {
	t.backlog.init()
	now := time.Now().UnixMilli()
	var oldest int64 = -1
	var name string
	seen := map[string]bool{}
	for _, s := range t.subList() {
		if s.nonDurable {
			continue
		}
		seen[s.name] = true
		s.mu.Lock()
		t.ml.mu.Lock()
		p, ok := s.firstUnackedLocked()
		t.ml.mu.Unlock()
		s.mu.Unlock()
		if !ok {
			continue
		}
		t.backlog.mu.Lock()
		c, hit := t.backlog.oldest[s.name]
		t.backlog.mu.Unlock()
		if !hit || c.p != p {
			e, err := t.readOne(ctx, p)
			if err != nil {
				t.log.Debug("backlog age: oldest entry unreadable", "cursor", s.name, "err", err)
				continue
			}
			_, md, ok := t.entryOrigin(e)
			if !ok {
				continue
			}
			c = oldestEntry{p: p, ms: originTime(md)}
			t.backlog.mu.Lock()
			t.backlog.oldest[s.name] = c
			t.backlog.mu.Unlock()
		}
		if oldest < 0 || c.ms < oldest {
			oldest, name = c.ms, s.name
		}
	}
	t.backlog.mu.Lock()
	for n := range t.backlog.oldest {
		if !seen[n] {
			delete(t.backlog.oldest, n)
		}
	}
	t.backlog.mu.Unlock()
	if oldest < 0 {
		return 0, ""
	}
	return time.Duration(max(now-oldest, 0)) * time.Millisecond, name
}

// admitSend applies the backlog quota to a producer's send: nil when the
// backlog is within the quota; with PRODUCER_ERROR the quota error at once;
// with PRODUCER_HOLD it waits until the backlog is back within the quota,
// and fails with the quota error when ctx ends first (or the topic's
// unload error when it closes).
func (t *topic) admitSend(ctx context.Context) error {
	err := t.quotaErr()
	if err == nil {
		return nil
	}
	if _, action, _ := t.backlogQuota(); action == clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR {
		return err
	}
	tick := time.NewTicker(quotaPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (held until the send's context ended: %v)", err, ctx.Err())
		case <-t.stop:
			return &notOwnedError{}
		case <-tick.C:
		}
		if err = t.quotaErr(); err == nil {
			return nil
		}
	}
}

// validateBacklogQuota checks the backlog quota fields of a policy
// (backlog_quota_bytes, backlog_quota_age_seconds, backlog_quota_action)
// and that consumer_backlog_eviction is not the max_replication_lag_action
// (a replicator's backlog is never evicted).
func validateBacklogQuota(p *clientv1.NamespacePolicies) error {
	if p.BacklogQuotaBytes != nil && p.GetBacklogQuotaBytes() < -1 {
		return fmt.Errorf("%w: backlog_quota_bytes %d must be -1 (no quota) or >= 0", ErrInvalidArgument, p.GetBacklogQuotaBytes())
	}
	const maxAge = 100 * 365 * 24 * 3600
	if p.BacklogQuotaAgeSeconds != nil && (p.GetBacklogQuotaAgeSeconds() < -1 || p.GetBacklogQuotaAgeSeconds() > maxAge) {
		return fmt.Errorf("%w: backlog_quota_age_seconds %d must be -1 (no quota) or in [0, %d]", ErrInvalidArgument, p.GetBacklogQuotaAgeSeconds(), maxAge)
	}
	if p.MessageTtlSeconds != nil && (p.GetMessageTtlSeconds() < 0 || p.GetMessageTtlSeconds() > maxAge) {
		return fmt.Errorf("%w: message_ttl_seconds %d must be 0 (no TTL) or in [1, %d]", ErrInvalidArgument, p.GetMessageTtlSeconds(), maxAge)
	}
	if _, ok := clientv1.QuotaAction_name[int32(p.GetBacklogQuotaAction())]; !ok {
		return fmt.Errorf("%w: backlog_quota_action %d is not PRODUCER_HOLD (0), PRODUCER_ERROR (1) or CONSUMER_BACKLOG_EVICTION (2)", ErrInvalidArgument, p.GetBacklogQuotaAction())
	}
	switch a := p.GetMaxReplicationLagAction(); a {
	case clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR:
	default:
		return fmt.Errorf("%w: max_replication_lag_action %s is not allowed: PRODUCER_HOLD (0) or PRODUCER_ERROR (1) (replication backlog is never evicted)", ErrInvalidArgument, a)
	}
	return nil
}
