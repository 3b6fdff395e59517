package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Seek resolution: a StartPosition (publish time, message ID, origin
// position, earliest/latest) becomes an ackVector — the messages BEFORE
// the start, in origin terms — plus a floor, the local position before the
// first entry the vector does not cover.
//
// The per-origin rule. A region's log interleaves the origins in its own
// order, so a local position means nothing elsewhere; but per origin,
// every region stores that origin's entries in origin_seq order, with the
// origin broker's publish time preserved. So for each origin the start is a
// mark-delete: the highest origin_seq such that it and every earlier entry
// of that origin in the log are before the start. Every region holding the
// same entries computes the same vector, so the same StartPosition selects
// the same messages in every region.
//
//   - publish_time_ms T: per origin, the entries whose origin broker publish
//     time is < T, up to the first one that is not.
//   - origin (R, L, E): the entry produced in R at L:E. R's entries before it
//     (origin_seq below its own) and, for every other origin, the entries
//     published before it (its origin broker publish time, as above).
//   - message_id: a local position, resolved to the entry's origin key and
//     then handled as an origin position.
//   - initial EARLIEST: nothing; LATEST: per origin the highest origin_seq
//     stored here.
//
// Cost: time, origin and message-ID positions scan the retained log from
// its first entry to its last (through the managed ledger, in batches of
// seekScanBatch, within seekScanTimeout); an origin position of another
// region scans once more to find the named entry.

// seekScanBatch is how many entries one read of the resolution scan asks.
const seekScanBatch = 500

// seekScanTimeout bounds one resolution (both scans) started from a
// consume stream; an admin reset uses the RPC's own deadline.
const seekScanTimeout = 2 * time.Minute

// seekResolution is a resolved StartPosition.
type seekResolution struct {
	// vec acknowledges every message before the start (origin terms).
	vec ackVector
	// floor is the local position before the first entry vec does not
	// cover (everything at or before it is covered).
	floor pos
	// initial: an earliest/latest start, exact as a position alone.
	initial bool
}

// resolveStart resolves sp against t's log (see the comment at the top of
// this file): the vector of the messages before the start and the floor.
func (t *topic) resolveStart(ctx context.Context, sp *clientv1.StartPosition) (ackVector, pos, error) {
	r, err := t.resolve(ctx, "start", sp)
	if err != nil {
		return nil, pos{}, err
	}
	return r.vec, r.floor, nil
}

// resolve is resolveStart; field names sp in errors ("start",
// "seek.position", ...). It counts and times the resolution.
func (t *topic) resolve(ctx context.Context, field string, sp *clientv1.StartPosition) (*seekResolution, error) {
	start := time.Now()
	r, err := t.resolveKind(ctx, field, sp)
	if m := t.b.metrics; m != nil {
		kind, result := "unset", "ok"
		switch sp.GetKind().(type) {
		case *clientv1.StartPosition_Initial:
			kind = "initial"
		case *clientv1.StartPosition_PublishTimeMs:
			kind = "time"
		case *clientv1.StartPosition_MessageId:
			kind = "message_id"
		case *clientv1.StartPosition_Origin:
			kind = "origin"
		}
		if err != nil {
			result = "error"
		}
		m.seekResolutions.WithLabelValues(kind, result).Inc()
		m.seekSeconds.Observe(time.Since(start).Seconds())
	}
	if err == nil {
		t.log.Debug("start position resolved", "field", field, "floor", fmt.Sprintf("%d:%d", r.floor.L, r.floor.E),
			"origins", len(r.vec), "took", time.Since(start))
	}
	return r, err
}

func (t *topic) resolveKind(ctx context.Context, field string, sp *clientv1.StartPosition) (*seekResolution, error) {
	switch k := sp.GetKind().(type) {
	case *clientv1.StartPosition_Initial:
		switch k.Initial {
		case clientv1.InitialPosition_INITIAL_POSITION_EARLIEST:
			t.ml.mu.Lock()
			defer t.ml.mu.Unlock()
			return &seekResolution{vec: ackVector{}, floor: t.ml.beforeFirstLocked(), initial: true}, nil
		case clientv1.InitialPosition_INITIAL_POSITION_LATEST:
			v, last := t.latestVector()
			return &seekResolution{vec: v, floor: last, initial: true}, nil
		}
		return nil, fmt.Errorf("%w: %s.initial %d is not LATEST or EARLIEST", ErrInvalidArgument, field, k.Initial)
	case *clientv1.StartPosition_PublishTimeMs:
		if k.PublishTimeMs < 0 {
			return nil, fmt.Errorf("%w: %s.publish_time_ms %d must be >= 0 (Unix ms)", ErrInvalidArgument, field, k.PublishTimeMs)
		}
		return t.scanStart(ctx, originKey{}, k.PublishTimeMs)
	case *clientv1.StartPosition_MessageId:
		id := k.MessageId
		if id.GetLedgerId() < 0 || id.GetEntryId() < 0 {
			return nil, fmt.Errorf("%w: %s.message_id %d:%d: ledger and entry must be >= 0", ErrInvalidArgument, field, id.GetLedgerId(), id.GetEntryId())
		}
		e, err := t.readOne(ctx, pos{id.GetLedgerId(), id.GetEntryId()})
		if err != nil {
			return nil, fmt.Errorf("%s.message_id %d:%d: %w", field, id.GetLedgerId(), id.GetEntryId(), err)
		}
		key, md, ok := t.entryOrigin(e)
		if !ok {
			return nil, fmt.Errorf("%w: %s.message_id %d:%d is not a decodable entry with an origin", ErrInvalidArgument, field, id.GetLedgerId(), id.GetEntryId())
		}
		return t.scanStart(ctx, key, originTime(md))
	case *clientv1.StartPosition_Origin:
		o := k.Origin
		if err := ValidateName(field+".origin.region", o.GetRegion()); err != nil {
			return nil, err
		}
		if o.GetLedgerId() < 0 || o.GetEntryId() < 0 {
			return nil, fmt.Errorf("%w: %s.origin %s:%d:%d: ledger and entry must be >= 0", ErrInvalidArgument, field, o.GetRegion(), o.GetLedgerId(), o.GetEntryId())
		}
		key, ms, err := t.findOrigin(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("%s.origin %s:%d:%d: %w", field, o.GetRegion(), o.GetLedgerId(), o.GetEntryId(), err)
		}
		return t.scanStart(ctx, key, ms)
	case nil:
		return nil, fmt.Errorf("%w: %s is unset: give message_id, publish_time_ms, origin or initial", ErrInvalidArgument, field)
	}
	return nil, fmt.Errorf("%w: %s: unknown kind %T", ErrInvalidArgument, field, sp.GetKind())
}

// originTime is an entry's origin broker publish time (preserved by
// replication), or its producer's publish time for entries written before
// brokers stamped one.
func originTime(md *clientv1.EntryMetadata) int64 {
	if ms := md.GetBrokerPublishTimeMs(); ms > 0 {
		return ms
	}
	return md.GetPublishTimeMs()
}

// latestVector is the LATEST start: per origin the highest origin_seq
// stored here (repsub's latestVectorLocked: own region from the local
// numbering, others from the replication pseudo-producers' dedup state,
// which is never evicted), and the last stored position.
func (t *topic) latestVector() (ackVector, pos) {
	ml := t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.latestVectorLocked(t.b.cfg.Region), ml.lastPosLocked()
}

// readOne reads the stored entry at p: ErrNotFound when p's ledger is no
// longer retained or p is past the last stored entry.
func (t *topic) readOne(ctx context.Context, p pos) (LedgerEntry, error) {
	ml := t.ml
	ml.mu.Lock()
	_, retained := ml.seqOf[p.L]
	beyond := retained && ml.lessLocked(ml.lastPosLocked(), p)
	ml.mu.Unlock()
	if !retained {
		return LedgerEntry{}, fmt.Errorf("%w: ledger %d is not a retained ledger of %s", ErrNotFound, p.L, t.name)
	}
	if beyond {
		return LedgerEntry{}, fmt.Errorf("%w: entry %d:%d is after the last stored entry of %s", ErrNotFound, p.L, p.E, t.name)
	}
	ents, err := ml.read(ctx, p, 1)
	if err != nil {
		return LedgerEntry{}, err
	}
	if len(ents) == 0 {
		return LedgerEntry{}, fmt.Errorf("%w: entry %d:%d of %s is not readable yet", ErrNotFound, p.L, p.E, t.name)
	}
	return ents[0], nil
}

// findOrigin finds the entry named by an origin position: in this region
// the entry at that local position (produced here); for another region
// the replicated entry carrying that origin position. It returns its
// origin key and origin time; ErrNotFound when no such entry is retained
// here (maybe not replicated yet, or trimmed).
func (t *topic) findOrigin(ctx context.Context, o *clientv1.OriginPosition) (originKey, int64, error) {
	notFound := func() error {
		return fmt.Errorf("%w: no entry produced in region %s at %d:%d is retained in region %s (not replicated here yet, trimmed, or never produced)",
			ErrNotFound, o.GetRegion(), o.GetLedgerId(), o.GetEntryId(), t.b.cfg.Region)
	}
	if o.GetRegion() == t.b.cfg.Region {
		e, err := t.readOne(ctx, pos{o.GetLedgerId(), o.GetEntryId()})
		if errors.Is(err, ErrNotFound) {
			return originKey{}, 0, notFound()
		}
		if err != nil {
			return originKey{}, 0, err
		}
		key, md, ok := t.entryOrigin(e)
		if region, _ := splitOriginStream(key.Region); !ok || region != o.GetRegion() {
			return originKey{}, 0, notFound()
		}
		return key, originTime(md), nil
	}
	var found originKey
	var ms int64
	err := t.scanLog(ctx, func(e LedgerEntry) bool {
		key, md, ok := t.entryOrigin(e)
		if ok && md.GetReplicated() && md.GetOriginRegion() == o.GetRegion() &&
			md.GetOriginLedgerId() == o.GetLedgerId() && md.GetOriginEntryId() == o.GetEntryId() {
			found, ms = key, originTime(md)
			return false
		}
		return true
	})
	if err != nil {
		return originKey{}, 0, err
	}
	if found.Region == "" {
		return originKey{}, 0, notFound()
	}
	return found, ms, nil
}

// scanLog calls fn on every stored entry from the first retained one to
// the last stored when the scan began, in log order, until fn returns
// false.
func (t *topic) scanLog(ctx context.Context, fn func(LedgerEntry) bool) error {
	ml := t.ml
	ml.mu.Lock()
	cur, end := ml.beforeFirstLocked(), ml.lastPosLocked()
	ml.mu.Unlock()
	for {
		ml.mu.Lock()
		next, ok := ml.nextLocked(cur)
		past := ok && ml.lessLocked(end, next)
		ml.mu.Unlock()
		if !ok || past {
			return nil
		}
		ents, err := ml.read(ctx, next, seekScanBatch)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: ledger %d was trimmed by retention during the scan; retry", ErrUnavailable, next.L)
		}
		if err != nil {
			return fmt.Errorf("scan %s at %d:%d: %w", t.name, next.L, next.E, err)
		}
		if len(ents) == 0 {
			return nil
		}
		if m := t.b.metrics; m != nil {
			m.seekScanned.Add(float64(len(ents)))
		}
		for _, e := range ents {
			p := pos{e.LedgerID, e.EntryID}
			ml.mu.Lock()
			past := ml.lessLocked(end, p)
			ml.mu.Unlock()
			if past || !fn(e) {
				return nil
			}
			cur = p
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: resolution scan of %s stopped at %d:%d: %v", ErrUnavailable, t.name, cur.L, cur.E, err)
		}
	}
}

// scanStart resolves a start at target (an origin key; zero for a pure
// time start) with origin time ms: target's origin is covered below
// target's origin_seq, every other origin up to its first entry published
// at or after ms.
func (t *topic) scanStart(ctx context.Context, target originKey, ms int64) (*seekResolution, error) {
	r := &seekResolution{vec: ackVector{}}
	closed := map[string]bool{}
	if target.Region != "" {
		if target.Seq > 1 {
			r.vec.setMD(target.Region, target.Seq-1)
		}
		closed[target.Region] = true
	}
	t.ml.mu.Lock()
	r.floor = t.ml.beforeFirstLocked()
	t.ml.mu.Unlock()
	floorDone := false
	err := t.scanLog(ctx, func(e LedgerEntry) bool {
		key, md, ok := t.entryOrigin(e)
		covered := false
		switch {
		case !ok:
			// No origin key (undecodable): never covered, the dispatcher
			// deals with it.
		case key.Region == target.Region:
			covered = key.Seq < target.Seq
		case !closed[key.Region]:
			if originTime(md) < ms {
				r.vec.setMD(key.Region, key.Seq)
				covered = true
			} else {
				closed[key.Region] = true
			}
		}
		if !floorDone {
			if covered {
				r.floor = pos{e.LedgerID, e.EntryID}
			} else {
				floorDone = true
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// seek resolves sp and moves s there (Consume's Seek, Subscribe.start on a
// new subscription, admin reset). Consumers other than except are
// disconnected, as Pulsar does: what they hold was delivered before the
// seek; they reconnect and receive from the new position.
func (t *topic) seek(ctx context.Context, s *subscription, field string, sp *clientv1.StartPosition, except *consumer) error {
	r, err := t.resolve(ctx, field, sp)
	if err != nil {
		return err
	}
	t.applyResolution(s, r)
	s.mu.Lock()
	var others []*consumer
	for _, c := range s.consumers {
		if c != except {
			others = append(others, c)
		}
	}
	s.mu.Unlock()
	for _, c := range others {
		c.closeDone()
	}
	if s.nonDurable {
		return nil
	}
	if err := s.persist(ctx, true); err != nil {
		return fmt.Errorf("%w: seek applied in memory; persisting the cursor failed: %v", ErrUnavailable, err)
	}
	return nil
}

// applyResolution moves s to a resolved start: the vector becomes its
// cover (repsub's seekVector: the dispatcher and the cover's apply scan
// acknowledge every covered entry, including ones stored later), delivery
// restarts after the floor. On a replicated subscription seekVector also
// ships the reset to every region.
//
// An earliest/latest start of a subscription that is not replicated is a
// plain position reset: no cover vector, so no cover work afterwards.
func (t *topic) applyResolution(s *subscription, r *seekResolution) {
	if r.initial && !s.isReplicated() {
		s.reset(r.floor)
		return
	}
	s.seekVector(r.vec, r.floor)
}

// seekContext bounds a resolution started from a consume stream.
func seekContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, seekScanTimeout)
}

// dropQueued empties c's outgoing queue after a seek, so that every
// message the stream sends after the SeekResponse comes from the new
// position: a queued message delivered before the seek is stale (its
// permit is given back); one delivered after it goes back to the
// redelivery queue. Other responses are returned, in order, for the
// caller to send. Only the stream goroutine (c.out's sole reader) calls it.
func (s *subscription) dropQueued(c *consumer) []*clientv1.ConsumeResponse {
	var keep []*clientv1.ConsumeResponse
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		select {
		case r := <-c.out:
			m := r.GetMessage()
			if m == nil {
				keep = append(keep, r)
				continue
			}
			c.hold.release(deliverySize(r))
			p := pos{m.GetMessageId().GetLedgerId(), m.GetMessageId().GetEntryId()}
			if s.pending[p] == c {
				delete(s.pending, p)
				c.pending--
				s.redeliver[p] = struct{}{}
			}
			c.permits++
		default:
			// A dispatch round that read entries before this drop and
			// delivers them after it would put them ahead of the
			// entries just moved to the redelivery queue (the test saw
			// m28 before m5): a new read epoch makes it discard them,
			// and the next round reads them again, after the
			// redeliveries.
			s.readEpoch++
			s.kick()
			return keep
		}
	}
}
