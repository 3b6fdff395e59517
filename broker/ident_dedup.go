package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Cross-region dedup of a producer that failed over (issue: messages
// stored twice after a client failover).
//
// Under a cut of the client's path to region a, batches in flight stall in
// the connection; the client fails over and resends them in b. After the
// heal the stalled bytes reach a, which stores them and replicates them:
// without more, b (and every other region) keeps both copies, since the
// copy from a has a new origin key (a, origin_seq) and the resend in b is a
// local entry of b. The failover carry-over (failover_dedup.go) only
// catches a resend of a message already replicated, not a replicated copy
// of a resent one.
//
// A multi-region client gives each producer instance a failover identity
// (OpenProducer.failover_identity: random, the same on every open of that
// producer, in every region). The broker stores it with the producer's
// entries (EntryMetadata.producer_identity), so the pair (identity,
// producer_name) names the producer's sequence IDs wherever the entry was
// stored first. Per such pair a topic keeps the exact set of sequence IDs
// stored in this region's log (seqRanges: an interval set, normally one
// interval) under the dedup key "meridian.from.=<identity>/<producer>".
// The key follows every dedup key: recorded when an entry is stored
// (appendOne), kept in the dedup snapshot (its intervals), rebuilt by the
// takeover scan from the stored entries, forgotten in LRU order.
//
// Uses:
//   - A replicated entry all of whose messages are in the set is not
//     stored: it is answered DUPLICATE and still advances its origin's
//     replication progress (meridian.repl.<origin>), after every earlier
//     entry of that origin queued here is stored (skipCovered), so a
//     failure before it cannot leave a hole that dedup would answer
//     duplicate forever. The gap rule applies to it as to an append.
//   - A local send (the stalled original reaching a after b's copy was
//     replicated to a; a resend in a after switching back) all of whose
//     messages are in the set is answered duplicate, once every earlier
//     batch of the producer queued here is stored (checkDupIdent).
//   - A batch that would be covered once queued batches of the identity
//     are stored waits for them (bounded), then decides: the two copies
//     may race in the append queue.
//
// Guarantee: an entry is dropped only when every message of it is already
// stored in this region (exact ranges, not a high-water mark: a third
// region may receive the resent 101..200 from b before 1..105 from a).
// Partial overlaps are stored (duplicates remain, counted by consumers).
// The identity is random per producer instance, so a producer restarted
// with the same name and reused sequence IDs is never mistaken for the old
// one. Forgetting (LRU, the interval bound, a snapshot that left a name
// out) only lets a duplicate through.

// identDedupPrefix starts the failover-identity dedup keys. It lies under
// FailoverDedupPrefix, so producers cannot use it, and "=" cannot start a
// region name, so the keys never meet fromDedupName's.
const identDedupPrefix = FailoverDedupPrefix + "="

// maxFailoverIdentityBytes bounds OpenProducer.failover_identity.
const maxFailoverIdentityBytes = 128

// identDedupName is the dedup key of the sequence IDs of producer under
// failover identity id.
func identDedupName(id, producer string) string {
	return identDedupPrefix + id + "/" + producer
}

func isIdentName(name string) bool { return strings.HasPrefix(name, identDedupPrefix) }

// validateFailoverIdentity checks OpenProducer.failover_identity ("" is
// allowed: no identity).
func validateFailoverIdentity(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > maxFailoverIdentityBytes {
		return fmt.Errorf("%w: failover_identity is %d bytes, limit %d", ErrInvalidArgument, len(id), maxFailoverIdentityBytes)
	}
	return ValidateName("failover_identity", id)
}

// entryIdent returns the failover-identity dedup key of an entry and its
// batch [first, highest]; ok is false for entries without an identity or
// a producer name, or with a malformed identity (not tracked: safe).
func entryIdent(md *clientv1.EntryMetadata) (name string, first, highest int64, ok bool) {
	id := md.GetProducerIdentity()
	if id == "" || md.GetProducerName() == "" || validateFailoverIdentity(id) != nil {
		return "", 0, 0, false
	}
	hs := md.GetHighestSequenceId()
	if hs < md.GetSequenceId() {
		hs = md.GetSequenceId() + int64(md.GetNumMessages()) - 1
	}
	return identDedupName(id, md.GetProducerName()), md.GetSequenceId(), hs, true
}

// storedIdent records that batch [first, highest] under identity key name
// is stored at at, making room like a new producer does.
func (d *dedupTable) storedIdent(name string, first, highest int64, at pos, nowMs int64) {
	if _, ok := d.byName[name]; !ok && len(d.byName) >= d.max {
		d.evictOne()
	}
	p := d.upsert(name)
	p.raise(highest, first, at, true)
	p.addRange(first, highest)
	d.touch(p, nowMs)
}

// observeIdent records a batch under identity key name found by the
// takeover scan (every name found is tracked, as observe does).
func (d *dedupTable) observeIdent(name string, first, highest int64, at pos, usedMs int64) {
	p := d.upsert(name)
	p.raise(highest, first, at, true)
	p.addRange(first, highest)
	p.usedMs = max(p.usedMs, usedMs)
}

// addRange adds [first, highest] to p's stored sequence IDs.
func (p *dedupProducer) addRange(first, highest int64) {
	if p.ranges == nil {
		p.ranges = &seqRanges{}
	}
	p.ranges.add(first, highest, maxIdentRanges)
}

// identCovers reports whether every sequence ID of [first, highest] under
// identity key name is stored here.
func (d *dedupTable) identCovers(name string, first, highest int64) bool {
	p, ok := d.byName[name]
	return ok && p.ranges != nil && p.ranges.covers(first, highest)
}

// identPending is a queued batch of a failover-identity key; done closes
// when it is stored or failed (after the stored ranges are updated).
type identPending struct {
	first, last int64
	done        chan struct{}
}

// pendIdent records r's batch as queued under its identity key until r
// completes (it wraps r.done). Call release when r is not queued after all
// (enqueue failed); it is idempotent.
func (ml *managedLedger) pendIdent(r *appendReq) (release func()) {
	if r.ident == "" {
		return func() {}
	}
	pe := &identPending{first: r.identFirst, last: r.identLast, done: make(chan struct{})}
	name := r.ident
	ml.mu.Lock()
	if ml.dedup.pending == nil {
		ml.dedup.pending = map[string][]*identPending{}
	}
	ml.dedup.pending[name] = append(ml.dedup.pending[name], pe)
	ml.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			ml.mu.Lock()
			l := ml.dedup.pending[name]
			for i, x := range l {
				if x == pe {
					l = append(l[:i:i], l[i+1:]...)
					break
				}
			}
			if len(l) == 0 {
				delete(ml.dedup.pending, name)
			} else {
				ml.dedup.pending[name] = l
			}
			ml.mu.Unlock()
			close(pe.done)
		})
	}
	done := r.done
	r.done = func(p pos, err error) {
		release()
		done(p, err)
	}
	return release
}

// identCoverLocked tells whether every sequence ID of [first, highest]
// under identity key name is stored (covered), or else whether it would be
// once the queued batches in waits are stored (waits non-empty).
func (d *dedupTable) identCoverLocked(name string, first, highest int64) (covered bool, waits []<-chan struct{}) {
	if d.identCovers(name, first, highest) {
		return true, nil
	}
	pend := d.pending[name]
	if len(pend) == 0 {
		return false, nil
	}
	var all seqRanges
	if p, ok := d.byName[name]; ok && p.ranges != nil {
		all.r = p.ranges.intervals()
	}
	for _, pe := range pend {
		all.add(pe.first, pe.last, 0)
		if pe.first <= highest && pe.last >= first {
			waits = append(waits, pe.done)
		}
	}
	if !all.covers(first, highest) {
		return false, nil
	}
	return false, waits
}

// identWaitLimit bounds how long a send or a replicated entry waits for the
// queued batches that would cover it; past it, it is stored (a duplicate,
// never a loss).
const identWaitLimit = 10 * time.Second

// waitAll waits until every channel is closed; it fails (ErrUnavailable)
// when ctx ends or identWaitLimit passes first.
func waitAll(ctx context.Context, chs []<-chan struct{}) error {
	timer := time.NewTimer(identWaitLimit)
	defer timer.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: stream ended while waiting for a copy of the batch being stored: %v", ErrUnavailable, ctx.Err())
		case <-timer.C:
			return fmt.Errorf("%w: a copy of the batch is still being stored after %v; resend it", ErrUnavailable, identWaitLimit)
		}
	}
	return nil
}

// checkDupIdent is checkDup for a producer with a failover identity key
// ident ("" for none). A batch that is not a duplicate of the producer's
// own sends but whose every message is already stored here (replicated
// from the region the producer failed over to, or left) is answered a
// stored duplicate at an unknown position, and the producer's own key is
// raised over it. Raising the key is safe only once every earlier batch of
// the producer queued here is stored (else one that fails would have its
// resend answered duplicate: lost), and the cover may be still being
// stored: in both cases it waits for the identity's queued batches
// (ctx, identWaitLimit), then decides; on a timeout or a failure the batch
// is stored (a duplicate, never a loss). When the wait ends first (ctx,
// identWaitLimit) it returns an error and forgets the batch as queued: the
// caller must refuse it and every later send of the stream (storing it
// after the stream ended would race the client's resend elsewhere).
func (ml *managedLedger) checkDupIdent(ctx context.Context, producer, ident string, seq, highest int64) (dup bool, r dupResult, err error) {
	if ident != "" && producer == ident {
		return ml.checkDupOwnIdent(ctx, ident, seq, highest)
	}
	ml.mu.Lock()
	d := ml.dedup
	prevPushed, prevStored := int64(-1), int64(-1)
	if p, ok := d.byName[producer]; ok {
		prevPushed, prevStored = p.pushed, p.stored
	}
	dup, r.stored, r.id, r.batchIndex, r.known = d.check(producer, seq, highest, time.Now().UnixMilli())
	if dup || ident == "" {
		ml.mu.Unlock()
		return dup, r, nil
	}
	covered, waits := d.identCoverLocked(ident, seq, highest)
	if !covered && len(waits) == 0 {
		ml.mu.Unlock()
		return false, r, nil
	}
	if prevPushed > prevStored {
		// Earlier batches in flight: the producer's own, queued under the
		// same identity (one stream at a time per producer name).
		for _, pe := range d.pending[ident] {
			if pe.last < seq {
				waits = append(waits, pe.done)
			}
		}
	}
	ml.mu.Unlock()
	if len(waits) > 0 {
		if err := waitAll(ctx, waits); err != nil {
			ml.unpush(producer, highest)
			return false, r, err
		}
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	p, ok := ml.dedup.byName[producer]
	if !ok || p.stored < prevPushed || !ml.dedup.identCovers(ident, seq, highest) {
		return false, r, nil
	}
	if highest > p.stored {
		p.stored, p.first, p.known = highest, seq, false
		p.pushed = max(p.pushed, p.stored)
	}
	return true, dupResult{stored: true}, nil
}

// dedupName is the dedup key of a producer's own sends: its failover
// identity key when it gave an identity, else its name. The name alone is
// not the producer's stream: two producer instances may use one name, in
// one region one after the other, or in two regions at once (each writes
// where it is, one fails over into the other's region), and a high-water
// mark shared between them would answer one's new sends DUPLICATE of the
// other's: stored nowhere while the client counts them acknowledged.
func (p *producer) dedupName() string {
	if p.ident != "" {
		return p.ident
	}
	return p.name
}

// checkDupOwnIdent is checkDupIdent for a producer deduplicated by its
// identity key alone (dedupName): a batch is a duplicate exactly when
// every sequence ID of it is stored here under the identity (the exact
// ranges, whichever region stored it first), or will be once the
// identity's queued batches are stored (it waits for them, ctx and
// identWaitLimit; when the wait ends first it returns an error: the caller
// refuses the batch and every later send of the stream). No high-water
// mark is kept, so nothing is answered duplicate that was not stored:
// forgetting (LRU, the interval bound) only lets a duplicate through.
func (ml *managedLedger) checkDupOwnIdent(ctx context.Context, ident string, seq, highest int64) (bool, dupResult, error) {
	ml.mu.Lock()
	covered, waits := ml.dedup.identCoverLocked(ident, seq, highest)
	if !covered && len(waits) == 0 {
		ml.mu.Unlock()
		return false, dupResult{}, nil
	}
	ml.mu.Unlock()
	if len(waits) > 0 {
		if err := waitAll(ctx, waits); err != nil {
			return false, dupResult{}, err
		}
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if !ml.dedup.identCovers(ident, seq, highest) {
		return false, dupResult{}, nil
	}
	r := dupResult{stored: true}
	if p, ok := ml.dedup.byName[ident]; ok {
		ml.dedup.touch(p, time.Now().UnixMilli())
		r.id, r.batchIndex, r.known = p.find(seq)
	}
	return true, r, nil
}

// identCovered reports whether every message of a replicated entry is
// already stored here under its failover identity; when queued batches of
// the identity would cover it, it waits for them first (ctx,
// identWaitLimit).
//
// When the wait ends first it returns an error: the entry must be
// rejected (and resent), not stored after its stream ended.
func (ml *managedLedger) identCovered(ctx context.Context, md *clientv1.EntryMetadata) (bool, error) {
	name, first, highest, ok := entryIdent(md)
	if !ok {
		return false, nil
	}
	ml.mu.Lock()
	covered, waits := ml.dedup.identCoverLocked(name, first, highest)
	ml.mu.Unlock()
	if covered || len(waits) == 0 {
		return covered, nil
	}
	if err := waitAll(ctx, waits); err != nil {
		return false, err
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.dedup.identCovers(name, first, highest), nil
}

// identCoverNow is identCovered without waiting: covered, or the queued
// batches of the identity to wait for before asking again (none: not
// covered).
func (ml *managedLedger) identCoverNow(md *clientv1.EntryMetadata) (covered bool, waits []<-chan struct{}) {
	name, first, highest, ok := entryIdent(md)
	if !ok {
		return false, nil
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.dedup.identCoverLocked(name, first, highest)
}

// replSkipped records origin_seq seq of replication key name as applied
// without storing its entry (every message of it was stored already). Call
// only once every entry of that origin queued before it is stored.
func (ml *managedLedger) replSkipped(name string, seq int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	p := ml.dedup.upsert(name)
	if seq > p.stored {
		p.stored, p.first, p.known = seq, seq, false
	}
	p.pushed = max(p.pushed, p.stored)
	ml.dedup.touch(p, time.Now().UnixMilli())
}

// inflightBelow returns the queued entries of name below seq.
func (r *replState) inflightBelow(name string, seq int64) []*replInflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*replInflight
	for s, f := range r.inflight[name] {
		if s < seq {
			out = append(out, f)
		}
	}
	return out
}

// skipCovered resolves entry i of a (origin_seq seq of replication key
// name, checked and recorded as queued by replCheck) as applied without
// storing it: DUPLICATE once every earlier queued entry of that origin is
// stored, REJECTED (to be resent) if one of them failed. It is tracked as
// in flight meanwhile, so a copy arriving on another stream waits for it.
func (t *topic) skipCovered(a *replAck, i int, name string, seq int64) {
	below := t.repl.inflightBelow(name, seq)
	f := t.repl.track(name, seq)
	a.wg.Add(1)
	go func() {
		ok := true
		for _, g := range below {
			<-g.done
			ok = ok && g.ok
		}
		if ok {
			t.ml.replSkipped(name, seq)
		} else {
			t.replUnpush(name, seq)
		}
		a.mu.Lock()
		if ok {
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE
		} else {
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
			a.errs[i] = fmt.Errorf("%w: an entry of %s before origin_seq %d was not stored; resend from it", ErrUnavailable, name, seq)
		}
		a.mu.Unlock()
		t.repl.finish(name, seq, f, ok)
		a.wg.Done()
	}()
}
