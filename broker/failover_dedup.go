package broker

import (
	"fmt"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Producer dedup carry-over for client failover.
//
// A producer that fails over from region a to region b resends, in b, the
// batches a did not acknowledge. Some of them may already have reached b
// by replication (stored in a, replicated, the receipt lost with the
// region). To answer those duplicate, every replicated entry feeds, besides
// its origin's pseudo-producer (meridian.repl.<origin>), the dedup key of
// its original producer qualified by its origin region:
// "meridian.from.<origin>/<producer>", with the producer's own sequence
// IDs. Like every dedup key it is recorded when the entry is stored
// (appendOne), kept in the dedup snapshot, and rebuilt by the takeover scan
// from the stored entries, so it survives crashes and ownership moves.
//
// An OpenProducer with failover_from = [a] and no failover identity gets
// last_sequence_id = the highest of its own key and
// meridian.from.a/<producer>; the producer's own key is raised to it, so a
// send at or below it is answered duplicate. A producer with a failover
// identity is deduplicated by its own stream only (ident_dedup.go,
// dedupName): the name alone may be shared by other producer instances,
// in either region, whose sequence IDs are not this one's.
// Messages acknowledged in a and not yet replicated when the client moved
// are not known to b: resent, they are stored in b, and arrive again from a
// after the heal. For producers with a failover identity (every producer of
// a multi-region client) ident_dedup.go recognises that copy, in b and in
// every other region, and stores it once.

// FailoverDedupPrefix starts the origin-qualified dedup keys of the
// producers of replicated entries: "meridian.from.<origin>/<producer>".
// Producer names starting with it are refused.
const FailoverDedupPrefix = "meridian.from."

// maxFailoverFrom bounds OpenProducer.failover_from.
const maxFailoverFrom = MaxReplicationRegions

// fromDedupName is the dedup key of producer's entries replicated from
// origin.
func fromDedupName(origin, producer string) string {
	return FailoverDedupPrefix + origin + "/" + producer
}

// isFromName reports whether name is an origin-qualified dedup key.
func isFromName(name string) bool { return strings.HasPrefix(name, FailoverDedupPrefix) }

// originProducerKey is the second dedup key a replicated entry feeds: its
// original producer's batch [first, highest] under fromDedupName. ok is
// false for local entries and for entries without a producer name.
func originProducerKey(md *clientv1.EntryMetadata) (name string, first, highest int64, ok bool) {
	if !md.GetReplicated() || md.GetOriginRegion() == "" || md.GetProducerName() == "" {
		return "", 0, 0, false
	}
	hs := md.GetHighestSequenceId()
	if hs < md.GetSequenceId() {
		hs = md.GetSequenceId() + int64(md.GetNumMessages()) - 1
	}
	return fromDedupName(md.GetOriginRegion(), md.GetProducerName()), md.GetSequenceId(), hs, true
}

// validateFailoverFrom checks OpenProducer.failover_from.
func validateFailoverFrom(regions []string) error {
	if len(regions) > maxFailoverFrom {
		return fmt.Errorf("%w: failover_from has %d regions, limit %d", ErrInvalidArgument, len(regions), maxFailoverFrom)
	}
	for i, r := range regions {
		if err := ValidateName(fmt.Sprintf("failover_from[%d]", i), r); err != nil {
			return err
		}
	}
	return nil
}

// openSequence returns the last sequence ID to report to producer when it
// opens in region own after writing to the regions in from.
//
// A producer with a failover identity (ident, its own dedup key, see
// dedupName) gets the highest sequence ID stored here under that identity:
// its own stream's, whichever region stored it first. Nothing is carried
// into the producer name's key: another producer instance with the same
// name (in this region, or in the one left) has its own sequence IDs, and
// mixing them would answer this one's new sends DUPLICATE (stored nowhere)
// or raise the other's floor over its unsent messages.
//
// A producer without an identity (an old client) gets the highest of its
// own key and its origin-qualified keys of the regions in from (own is
// skipped); the own key is raised to it, so that a resend at or below it
// is answered duplicate (without an ID: where it is stored here is not
// tracked).
func (ml *managedLedger) openSequence(producer, ident, own string, from []string) int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ident != "" {
		return ml.dedup.lastSequence(ident)
	}
	carried := int64(-1)
	for _, r := range from {
		if r == own {
			continue
		}
		if p, ok := ml.dedup.byName[fromDedupName(r, producer)]; ok {
			carried = max(carried, p.stored)
		}
	}
	if carried >= 0 {
		ml.dedup.carryOver(producer, carried)
	}
	return ml.dedup.lastSequence(producer)
}

// carryOver raises producer name's highest stored sequence ID to seq
// (position unknown) when it is below.
func (d *dedupTable) carryOver(name string, seq int64) {
	p, ok := d.byName[name]
	if !ok {
		if len(d.byName) >= d.max {
			d.evictOne()
		}
		p = d.upsert(name)
	}
	if seq > p.stored {
		p.stored, p.first, p.known = seq, seq, false
	}
	p.pushed = max(p.pushed, p.stored)
}

// storedFrom records an origin-qualified key's batch, making room like a
// new producer does (the keys are not pinned: they follow the LRU).
func (d *dedupTable) storedFrom(name string, first, highest int64, at pos, nowMs int64) {
	if _, ok := d.byName[name]; !ok && len(d.byName) >= d.max {
		d.evictOne()
	}
	d.stored(name, first, highest, at, nowMs)
}
