package broker

import (
	"context"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// The backlog pass: every Config.BacklogPolicyInterval (and at once when a
// send finds a consumer_backlog_eviction quota exceeded) each topic
// applies, from its effective policies (t.currentPolicies()):
//
//   - message TTL (message_ttl_seconds > 0): on every durable subscription
//     (not replicator cursors, not readers) the entries published more than
//     the TTL ago are acknowledged (expire);
//   - consumer_backlog_eviction: every such subscription whose backlog is
//     past backlog_quota_bytes has its oldest entries acknowledged until it
//     is within it, and every one whose oldest unacknowledged entry is older
//     than backlog_quota_age_seconds has the entries older than that
//     acknowledged.
//
// A policy change starts a round at once (setPolicies, topicjobs.go).

// defaultBacklogPolicyInterval applies when Config.BacklogPolicyInterval
// is 0.
const defaultBacklogPolicyInterval = 5 * time.Second

// ttlReadsPerRound bounds the entries one round reads per subscription to
// find what TTL or age eviction expires (entries of ledgers closed before
// the cutoff need no read); a larger backlog is worked through over
// several rounds.
const ttlReadsPerRound = 10000

// statsReadTimeout bounds the reads of the oldest unacknowledged entries
// done for a stats call.
const statsReadTimeout = 2 * time.Second

// backlogWork reports whether a backlog round has anything to do under
// pol: a message TTL, or consumer_backlog_eviction with a size or age quota.
func backlogWork(pol *clientv1.NamespacePolicies) bool {
	if pol == nil {
		return false
	}
	if pol.GetMessageTtlSeconds() > 0 {
		return true
	}
	evict := pol.GetBacklogQuotaAction() == clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION
	sizeOK := pol.BacklogQuotaBytes != nil && pol.GetBacklogQuotaBytes() >= 0
	return evict && (sizeOK || pol.BacklogQuotaAgeSeconds != nil && pol.GetBacklogQuotaAgeSeconds() >= 0)
}

// backlogRound applies TTL and eviction once.
func (t *topic) backlogRound(ctx context.Context) {
	pol := t.currentPolicies()
	ttl := pol.GetMessageTtlSeconds()
	evict := pol.GetBacklogQuotaAction() == clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION
	limit, sizeOK := int64(0), pol.BacklogQuotaBytes != nil && pol.GetBacklogQuotaBytes() >= 0
	if sizeOK {
		limit = pol.GetBacklogQuotaBytes()
	}
	age := pol.GetBacklogQuotaAgeSeconds()
	if pol.BacklogQuotaAgeSeconds == nil {
		age = -1
	}
	if !backlogWork(pol) {
		return
	}
	now := time.Now().UnixMilli()
	for _, s := range t.subList() {
		if !s.evictable() || ctx.Err() != nil {
			continue
		}
		if ttl > 0 {
			if n, err := s.expire(ctx, now-ttl*1000, ttlReadsPerRound); err != nil {
				s.log.Warn("message TTL", "ttl_seconds", ttl, "expired", n, "err", err)
			} else if n > 0 {
				s.log.Debug("message TTL expired entries", "ttl_seconds", ttl, "expired", n)
			}
		}
		if !evict {
			continue
		}
		if sizeOK {
			if n := s.evictToSize(limit); n > 0 {
				s.countEvicted(n, "size")
				s.log.Info("backlog quota eviction", "backlog_quota_bytes", limit, "evicted_entries", n)
			}
		}
		if age >= 0 {
			target, ok, err := s.expireTarget(ctx, now-age*1000, ttlReadsPerRound)
			if ok {
				if n := s.ackThrough(target); n > 0 {
					s.countEvicted(n, "age")
					s.log.Info("backlog quota eviction", "backlog_quota_age_seconds", age, "evicted_entries", n)
				}
			}
			if err != nil {
				s.log.Warn("backlog quota eviction by age", "err", err)
			}
		}
	}
}

// evictToSize acknowledges s's oldest entries until its backlog (bytes
// after the mark-delete, as the quota counts it) is within limit; it
// returns the entries acknowledged.
func (s *subscription) evictToSize(limit int64) int64 {
	ml := s.t.ml
	md := s.markDeletePos()
	ml.mu.Lock()
	if ml.bytesAfterLocked(md) <= limit {
		ml.mu.Unlock()
		return 0
	}
	target := ml.sizeTargetLocked(limit)
	ml.mu.Unlock()
	return s.ackThrough(target)
}

// sizeTargetLocked returns the earliest position p with bytesAfterLocked(p)
// <= limit (entry sizes are estimated per ledger, as bytesAfterLocked
// does). Needs ml.mu.
func (ml *managedLedger) sizeTargetLocked(limit int64) pos {
	sizes := make([]int64, len(ml.rec.Ledgers))
	for i, li := range ml.rec.Ledgers {
		sizes[i] = li.Size
		if ml.writer != nil && li.ID == ml.writer.ID() {
			sizes[i] = ml.curSize
		}
	}
	var after int64 // bytes of the ledgers after i
	for i := len(ml.rec.Ledgers) - 1; i >= 0; i-- {
		n := ml.countLocked(i)
		if n > 0 && after+sizes[i] > limit {
			// Keep k entries of ledger i: after + size*k/n <= limit.
			k := int64(0)
			if sizes[i] > 0 {
				k = (limit - after) * n / sizes[i]
			}
			k = min(max(k, 0), n-1) // k < n: limit-after < sizes[i]
			return pos{ml.rec.Ledgers[i].ID, n - 1 - k}
		}
		after += sizes[i]
	}
	return ml.beforeFirstLocked()
}

// fillBacklogStats sets the backlog quota figures of a topic's stats and
// the expired/evicted counters of its subscriptions.
func (t *topic) fillBacklogStats(ctx context.Context, st *clientv1.TopicStats) {
	st.BacklogSizeBytes, _ = t.backlogBytes()
	// Bounded: stats must answer even when the oldest entry cannot be read
	// (it is then left out of the age).
	rctx, cancel := context.WithTimeout(ctx, statsReadTimeout)
	defer cancel()
	age, _ := t.oldestBacklog(rctx)
	st.OldestBacklogAgeSeconds = int64(age / time.Second)
	subs := map[string]*subscription{}
	for _, s := range t.subList() {
		subs[s.name] = s
	}
	for _, ss := range st.Subscriptions {
		if s := subs[ss.GetName()]; s != nil {
			ss.ExpiredEntriesTotal = s.bl.expired.Load()
			ss.EvictedEntriesTotal = s.bl.evicted.Load()
		}
	}
}
