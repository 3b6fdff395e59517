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
// ok is false when the namespace sets none (unset or -1).
func (t *topic) backlogQuota() (limit int64, action clientv1.QuotaAction, ok bool) {
	t.mu.Lock()
	pol := t.policies
	t.mu.Unlock()
	if pol == nil || pol.BacklogQuotaBytes == nil || pol.GetBacklogQuotaBytes() < 0 {
		return 0, 0, false
	}
	return pol.GetBacklogQuotaBytes(), pol.GetBacklogQuotaAction(), true
}

// quotaErr returns an ErrQuotaExceeded error naming the quota and the
// current backlog when the topic's backlog is past its quota, else nil.
func (t *topic) quotaErr() error {
	limit, _, ok := t.backlogQuota()
	if !ok {
		return nil
	}
	backlog, cursor := t.backlogBytes()
	if backlog <= limit {
		return nil
	}
	return fmt.Errorf("%w: backlog_quota_bytes %d of namespace %s exceeded: cursor %s has a backlog of %d bytes on %s; retry once consumers catch up",
		ErrQuotaExceeded, limit, t.name.NamespaceName(), cursor, backlog, t.name)
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

// validateBacklogQuota checks the backlog quota fields of a namespace's
// policies (backlog_quota_bytes, backlog_quota_action).
func validateBacklogQuota(p *clientv1.NamespacePolicies) error {
	if p.BacklogQuotaBytes != nil && p.GetBacklogQuotaBytes() < -1 {
		return fmt.Errorf("%w: backlog_quota_bytes %d must be -1 (no quota) or >= 0", ErrInvalidArgument, p.GetBacklogQuotaBytes())
	}
	if _, ok := clientv1.QuotaAction_name[int32(p.GetBacklogQuotaAction())]; !ok {
		return fmt.Errorf("%w: backlog_quota_action %d is not PRODUCER_HOLD (0) or PRODUCER_ERROR (1)", ErrInvalidArgument, p.GetBacklogQuotaAction())
	}
	return nil
}
