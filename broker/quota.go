package broker

import (
	"context"
	"errors"
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

// Two backlogs, two quotas (issue 20, item 9).
//
// The consumers' backlog is what the durable subscriptions have not
// acknowledged; backlog_quota_bytes and backlog_quota_age_seconds bound
// it, with backlog_quota_action, for producers' and replicated writes
// alike. Replicator cursors (meridian.repl.<region>) are not part of it:
// a region that is down, or removed with its cursor kept, must not stop
// writes in every region. The replication backlog is what the regions of
// the topic's replication set have not persisted yet, per region from its
// replicator cursor; replication_backlog_quota_bytes bounds it, with
// replication_backlog_quota_action (hold or error, never eviction), for
// producers' sends only, as the lag bound (max_replication_lag_ms) does
// in time. The kept cursor of a region no longer in the set counts for
// neither. Retention is unchanged: it never passes any replicator cursor,
// so unshipped data stays until its region has it (or its cursor is
// deleted after the region was removed).

// backlogBytes returns the largest consumers' backlog in bytes of the
// topic: of its durable subscriptions, counted from the mark-delete
// position, and the subscription's name. Replicator cursors do not count
// (replicationBacklogErr bounds them).
func (t *topic) backlogBytes() (int64, string) {
	subs := t.subList()
	var most int64
	var name string
	for _, s := range subs {
		if s.nonDurable || isReplName(s.name) {
			continue // a reader's backlog holds no quota; a replicator's has its own
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
// durable subscription (origin publish time; replicator cursors do not
// count, see backlogBytes) and the subscription's name; 0 when every one
// is caught up. Each cursor's oldest
// entry is read once per position (cached), not on every send.
func (t *topic) oldestBacklog(ctx context.Context) (time.Duration, string) {
	t.backlog.init()
	now := time.Now().UnixMilli()
	var oldest int64 = -1
	var name string
	seen := map[string]bool{}
	for _, s := range t.subList() {
		if s.nonDurable || isReplName(s.name) {
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

// replicationBacklogQuota returns the topic's replication backlog quota
// in bytes and its action; ok is false when the effective policy sets none
// (unset or -1).
func (t *topic) replicationBacklogQuota() (limit int64, action clientv1.QuotaAction, ok bool) {
	pol := t.currentPolicies()
	if pol == nil || pol.ReplicationBacklogQuotaBytes == nil || pol.GetReplicationBacklogQuotaBytes() < 0 {
		return 0, pol.GetReplicationBacklogQuotaAction(), false
	}
	return pol.GetReplicationBacklogQuotaBytes(), pol.GetReplicationBacklogQuotaAction(), true
}

// replicationBacklogErr returns the refusal of the replication backlog
// quota when the backlog of a region in t's replication set is past it
// (ErrQuotaRefused with producer_error, else ErrQuotaExceeded), else nil.
func (t *topic) replicationBacklogErr(ctx context.Context) error {
	limit, action, ok := t.replicationBacklogQuota()
	if !ok {
		return nil
	}
	for _, remote := range t.replicationRemotes(ctx) {
		sub, err := t.subscription(ReplicatorCursorPrefix + remote)
		if err != nil {
			continue // no cursor yet: nothing kept for it
		}
		md := sub.markDeletePos()
		t.ml.mu.Lock()
		b := t.ml.bytesAfterLocked(md)
		t.ml.mu.Unlock()
		if b > limit {
			sentinel := ErrQuotaExceeded
			if action == clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR {
				sentinel = ErrQuotaRefused
			}
			return fmt.Errorf("%w: replication_backlog_quota_bytes %d of %s exceeded: region %s has %d bytes not yet replicated",
				sentinel, limit, t.name, remote, b)
		}
	}
	return nil
}

// replicationGate applies the replication limits to a producer's send:
// the replication backlog quota, then the lag bound (replication.go).
// With producer_error a refusal is final (ErrQuotaRefused); with
// producer_hold the send waits, at most LagHoldTimeout.
func (t *topic) replicationGate(ctx context.Context) error {
	if err := t.replicationBacklogErr(ctx); err != nil {
		if errors.Is(err, ErrQuotaRefused) {
			return err
		}
		if err := t.holdWhile(ctx, err, func() error { return t.replicationBacklogErr(ctx) }); err != nil {
			return err
		}
	}
	return t.replicationLagGate(ctx)
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
	for _, f := range []struct {
		name string
		a    clientv1.QuotaAction
	}{{"max_replication_lag_action", p.GetMaxReplicationLagAction()}, {"replication_backlog_quota_action", p.GetReplicationBacklogQuotaAction()}} {
		switch f.a {
		case clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR:
		default:
			return fmt.Errorf("%w: %s %s is not allowed: PRODUCER_HOLD (0) or PRODUCER_ERROR (1) (replication backlog is never evicted)", ErrInvalidArgument, f.name, f.a)
		}
	}
	if p.ReplicationBacklogQuotaBytes != nil && p.GetReplicationBacklogQuotaBytes() < -1 {
		return fmt.Errorf("%w: replication_backlog_quota_bytes %d must be -1 (no quota) or >= 0", ErrInvalidArgument, p.GetReplicationBacklogQuotaBytes())
	}
	const maxLagMs = 100 * 365 * 24 * 3600 * 1000
	if ms := p.GetMaxReplicationLagMs(); ms < 0 || ms > maxLagMs {
		return fmt.Errorf("%w: max_replication_lag_ms %d must be 0 (no bound) or in [1, %d]", ErrInvalidArgument, ms, int64(maxLagMs))
	}
	return validateRegionList("max_replication_lag_regions", p.GetMaxReplicationLagRegions())
}
