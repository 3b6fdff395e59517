package broker

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Cover vectors.
//
// Every subscription may carry a cover vector (an ackVector): each entry
// of the topic whose origin key the cover covers counts as acknowledged on
// the cursor. It is how a position stated in origin terms — a seek by time
// or origin position (replay), or a replicated subscription's progress
// received from another region — applies to this region's copy of the
// topic, whose positions differ. The cover is applied in three places:
//
//   - by the dispatcher: an entry read for delivery (or redelivery) that
//     the cover covers is acknowledged, not delivered;
//   - by the apply scan: whenever the cover grows, the dispatch loop walks
//     the cursor's backlog from the mark-delete over a bounded window
//     (coverScanWindow entries beyond it), reading through the managed
//     ledger, and acknowledges what is covered, with or without a consumer,
//     so the backlog, stats and retention follow;
//   - to pending entries (delivered, not yet acknowledged): the scan
//     acknowledges them like any other, so the consumer's later ack or a
//     redelivery finds them done.
//
// Because the cover only ever acknowledges entries through the cursor's
// ack state (acked set and mark-delete), every subscription type — and any
// added later that keeps using that ack path — honours it.
//
// For a replicated subscription the cover is the subscription's whole
// acknowledgement vector V: the join of the vectors received from other
// regions and of this region's own acknowledgements translated to origin
// keys (translateLocked). Translating needs the origin key of each
// acknowledged entry: the dispatcher and the scan remember the key of
// every entry they read (origins, pruned as the mark-delete passes), and
// entries never read by this broker (acknowledged through a delivery of a
// previous owner) are read by the dispatch loop. vfront is how far the
// mark-delete has been translated; retention never trims past it.

// coverScanWindow bounds how far beyond the mark-delete the apply scan
// reads, so its memory (one origin key per entry) and the work per cover
// change stay bounded; entries beyond it are covered by the dispatcher
// when it reaches them.
const coverScanWindow = 50000

// coverReadBudget bounds the entries one round of cover work reads
// before letting the dispatcher run (the round continues at the next
// wake-up, which it requests).
const coverReadBudget = 2000

// coverState is a subscription's cover vector state; guarded by
// subscription.mu.
type coverState struct {
	// v is the cover vector (nil: none, and no cover work at all).
	v ackVector
	// gen grows when v grows by something not acknowledged here (a seek, a
	// received vector); scanned is the gen the apply scan last completed.
	gen, scanned int64
	// due asks the dispatch loop for cover work (translation or scan).
	due bool
	// more asks the scan to go on over entries appended since it last
	// ran (set while the subscription has no consumer: the dispatcher
	// covers entries itself when it has one); scanPos is where it stopped
	// (valid with scanValid, for generation scanned).
	more      bool
	scanPos   pos
	scanValid bool
	// appended is set by the topic on every append (cheap, no lock).
	appended atomic.Bool
	// warnedTrim counts the trims of v past its bound (the first is
	// logged).
	warnedTrim atomic.Int64
	// origins holds the origin keys of entries read, by position (zero key:
	// the entry has none); entries at or before min(mark-delete, vfront)
	// are pruned.
	origins map[pos]originKey
	// vfront: the entries up to it have been translated into v (replicated)
	// or pruned.
	vfront pos
	// newAcks are individual acknowledgements not yet translated, and
	// newBatch entries with batch-index acknowledgements not yet
	// translated (their bits are read from subscription.batchAcked).
	newAcks  []pos
	newBatch []pos

	// replicated marks a replicated subscription (subsync.go).
	replicated bool
	// epoch/region order resets across regions (higher replaces).
	epoch  int64
	region string
	// ver grows with every change of v (senders compare it); marks record
	// when versions appeared (see changed), for the lag of each remote.
	ver   int64
	marks []verMark
	// typ is the type last connected or received (shipped to others).
	typ clientv1.SubscriptionType
	// ownKeys caches ownKey per origin stream (the translation asks it for
	// every acknowledged entry).
	ownKeys map[string]string
}

// ownKey is ownKey(self, stream), cached.
func (c *coverState) ownKey(self, stream string) string {
	if k, ok := c.ownKeys[stream]; ok {
		return k
	}
	k := ownKey(self, stream)
	if c.ownKeys == nil || len(c.ownKeys) >= maxInterned {
		c.ownKeys = map[string]string{}
	}
	c.ownKeys[stream] = k
	return k
}

// boundCoverLocked keeps the cover within the vector bounds after it
// grew: other origins' exact claims are folded into this region's scoped
// claim (foldForeign), then the vector is trimmed to
// subscriptions.max_ack_vector_bytes (trim: it forgets acknowledgements,
// never adds any), which the metric
// meridian_subscription_ack_vector_dropped_total counts. Needs s.mu.
func (s *subscription) boundCoverLocked() {
	c := &s.cov
	if c.v == nil {
		return
	}
	lim := s.t.b.vlim.get()
	c.v.foldForeign(s.t.b.cfg.Region, lim)
	if n := c.v.trim(lim.maxBytes); n > 0 {
		if m := s.t.b.metrics; m != nil {
			m.vectorDropped.WithLabelValues(s.t.name.NamespaceName()).Add(float64(n))
		}
		if c.warnedTrim.Add(1) == 1 {
			s.t.log.Warn("acknowledgement vector past its bound: its highest ranges are dropped (their entries are delivered again after a move, never skipped)",
				"subscription", s.name, "limit_bytes", lim.maxBytes, "dropped", n)
		}
	}
}

// on reports whether the subscription does cover work at all.
func (c *coverState) on() bool { return c.v != nil }

// noteAck records an individual acknowledgement for translation.
func (c *coverState) noteAck(p pos) {
	if c.replicated {
		c.newAcks = append(c.newAcks, p)
	}
}

// noteBatch records batch-index acknowledgements of entry p for
// translation.
func (c *coverState) noteBatch(p pos) {
	if c.replicated {
		c.newBatch = append(c.newBatch, p)
	}
}

// Change marks: changed versions within markBucket of each other share
// one mark (the oldest time, the newest version), and at most maxMarks
// are kept (the two oldest merge): a remote's lag — the age of the first
// mark above the version it confirmed — is then exact to markBucket or
// an upper bound, never an underestimate.
const (
	markBucket = 10 * time.Millisecond
	maxMarks   = 1024
)

// verMark: versions up to ver appeared at or after at (and after the
// previous mark's version).
type verMark struct {
	ver int64
	at  time.Time
}

// changed records a change of v.
func (c *coverState) changed() {
	c.ver++
	now := time.Now()
	if n := len(c.marks); n > 0 && now.Sub(c.marks[n-1].at) < markBucket {
		c.marks[n-1].ver = c.ver
		return
	}
	c.marks = append(c.marks, verMark{c.ver, now})
	if len(c.marks) > maxMarks {
		c.marks[1].at = c.marks[0].at
		c.marks = c.marks[1:]
	}
}

// pruneMarks drops the marks every remote confirmed (ver <= upTo).
func (c *coverState) pruneMarks(upTo int64) {
	i := 0
	for i < len(c.marks) && c.marks[i].ver <= upTo {
		i++
	}
	c.marks = c.marks[i:]
}

// lagSince returns the time of the oldest change after version conf
// (zero: none).
func lagSince(marks []verMark, conf int64) time.Time {
	for _, m := range marks {
		if m.ver > conf {
			return m.at
		}
	}
	return time.Time{}
}

// resetLocked is the cover side of a reset to md by position: a
// non-replicated subscription drops its cover (the reset says exactly what
// is acknowledged); a replicated one keeps its vector (the caller replaces
// it through seekVector).
func (c *coverState) resetLocked(md pos) {
	c.newAcks = nil
	c.newBatch = nil
	c.vfront = md
	c.scanValid = false
	if !c.replicated {
		c.v = nil
		c.origins = nil
	}
}

// originOfLocked returns the origin key of e, remembering it while the
// subscription does cover work. Needs s.mu (not ml.mu: entryOrigin may
// take it).
func (s *subscription) originOfLocked(e LedgerEntry) originKey {
	p := pos{e.LedgerID, e.EntryID}
	if k, ok := s.cov.origins[p]; ok {
		return k
	}
	k, _, ok := s.t.entryOrigin(e)
	if !ok {
		k = originKey{}
	} else {
		k.Region = internRegion(k.Region)
	}
	if s.cov.origins == nil {
		s.cov.origins = map[pos]originKey{}
	}
	s.cov.origins[p] = k
	return k
}

// coverEntryLocked is the dispatcher's cover check of an entry it read:
// when the cover covers it, it is acknowledged (true: do not deliver).
func (s *subscription) coverEntryLocked(e LedgerEntry) bool {
	if !s.cov.on() {
		return false
	}
	k := s.originOfLocked(e)
	if k.Region == "" {
		return false
	}
	if !s.cov.v.coversEntry(k, s.t.b.cfg.Region) {
		s.coverBatchLocked(pos{e.LedgerID, e.EntryID}, k)
		return false
	}
	ml := s.t.ml
	ml.mu.Lock()
	s.ackByCoverLocked(pos{e.LedgerID, e.EntryID})
	s.compactLocked()
	s.afterAckLocked()
	ml.mu.Unlock()
	return true
}

// coverBatchLocked applies the cover's batch-index acknowledgements of
// entry p (origin key k) through the batch-index ack path: the indexes
// join the entry's acknowledged set, so the delivery names them
// (Message.acked_batch_indexes) and an entry whose every message is now
// acknowledged is acknowledged as a whole by deliverLocked. Needs s.mu.
func (s *subscription) coverBatchLocked(p pos, k originKey) {
	ws := s.cov.v.batchOfEntry(k, s.t.b.cfg.Region)
	if len(ws) == 0 {
		return
	}
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if !ml.lessLocked(s.markDelete, p) {
		return
	}
	if _, done := s.acked[p]; done {
		return
	}
	b := s.batchAcked[p]
	if b == nil {
		b = &batchBits{}
		s.batchAcked[p] = b
	}
	for w, x := range ws {
		for x != 0 {
			i := bits.TrailingZeros64(x)
			x &= x - 1
			if b.set(int32(w*64 + i)) {
				s.dirty = true
			}
		}
	}
}

// afterAckLocked follows acknowledgements (by a consumer or the cover):
// what can be translated into the vector without reading is translated
// now (so it ships without waiting for the dispatch loop), the rest is
// left to the dispatch loop; remembered keys the mark-delete passed are
// pruned. Needs s.mu and ml.mu.
func (s *subscription) afterAckLocked() {
	if !s.cov.on() {
		return
	}
	changed := false
	if _, st := s.translateHeldLocked(&changed); st != transDone {
		s.cov.due = true
		s.kick()
	}
	if changed {
		s.t.subsync.notify()
	}
}

// ackByCoverLocked acknowledges p (after the mark-delete) because the
// cover covers it; a pending delivery of it is dropped. Needs ml.mu.
func (s *subscription) ackByCoverLocked(p pos) {
	if !s.t.ml.lessLocked(s.markDelete, p) {
		return
	}
	if _, ok := s.acked[p]; ok {
		return
	}
	s.acked[p] = struct{}{}
	if c, ok := s.pending[p]; ok {
		delete(s.pending, p)
		c.pending--
	}
	delete(s.redeliver, p)
	delete(s.redelivers, p)
	s.dirty = true
}

// coverWork runs the subscription's pending cover work (called by the
// dispatch loop): translation of local acknowledgements into the vector
// (replicated subscriptions) and the apply scan after the cover grew. When
// work remains (read budget, or a read failed) it asks for another round.
func (s *subscription) coverWork() error {
	s.mu.Lock()
	if s.cov.appended.Swap(false) && s.cov.on() && len(s.consumers) == 0 && s.cov.scanValid {
		// New entries and no consumer to read them: the scan covers them,
		// so backlog and retention follow without a consumer.
		s.cov.more = true
		s.cov.due = true
	}
	if !s.cov.on() || !s.cov.due {
		s.mu.Unlock()
		return nil
	}
	s.cov.due = false
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.t.b.cfg.OperationTimeout)
	defer cancel()
	budget := coverReadBudget
	changed, err := s.translate(ctx, &budget)
	if err == nil {
		err = s.applyScan(ctx, &budget)
	}
	if changed {
		s.t.subsync.notify()
	}
	if err != nil || budget <= 0 {
		s.mu.Lock()
		s.cov.due = true
		s.mu.Unlock()
		if err != nil {
			time.AfterFunc(time.Second, s.kick)
		} else {
			s.kick()
		}
	}
	return err
}

// readOrigins reads the entries from p on (at most n, one ledger) and
// remembers their origin keys. A ledger no longer retained is not an
// error: its entries have no key to find (recorded as none).
func (s *subscription) readOrigins(ctx context.Context, p pos, n int, budget *int) error {
	ents, err := s.t.ml.read(ctx, p, n)
	*budget -= max(len(ents), 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cov.origins == nil {
		s.cov.origins = map[pos]originKey{}
	}
	if errors.Is(err, ErrNotFound) {
		s.cov.origins[p] = originKey{}
		return nil
	}
	for _, e := range ents {
		s.originOfLocked(e)
	}
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		// Not readable yet (beyond the LAC): nothing to learn now.
		return errNotYet
	}
	return nil
}

// errNotYet: an entry the cover work needs is not readable yet.
var errNotYet = errors.New("broker: entry not readable yet")

// translate adds the origin keys of the entries acknowledged locally (the
// mark-delete's progress and individual acks) to a replicated
// subscription's vector, and prunes the remembered keys the mark-delete
// passed. It reports whether the vector changed.
func (s *subscription) translate(ctx context.Context, budget *int) (bool, error) {
	changed := false
	for *budget > 0 {
		need, st := s.translateLocked(&changed)
		if st == transDone {
			return changed, nil
		}
		if st == transMore {
			continue // a slice walked; the locks were released
		}
		if err := s.readOrigins(ctx, need, maxReadBatch, budget); err != nil {
			if errors.Is(err, errNotYet) {
				return changed, nil
			}
			return changed, err
		}
	}
	return changed, nil
}

// transState is how far a translation step got.
type transState int

const (
	transDone transState = iota // everything acknowledged is in the vector
	transRead                   // the key of need must be read to go on
	transMore                   // a slice (scanChunk entries) walked: go on
)

// translateLocked does what it can without reading; it returns a position
// whose key it needs (transRead) to go on.
func (s *subscription) translateLocked(changed *bool) (need pos, st transState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return s.translateHeldLocked(changed)
}

// translateHeldLocked is translateLocked with s.mu and ml.mu held (the ack
// path translates at once what it can, so the vector ships without
// waiting for the dispatch loop).
func (s *subscription) translateHeldLocked(changed *bool) (need pos, st transState) {
	ml := s.t.ml
	c := &s.cov
	self, lim := s.t.b.cfg.Region, s.t.b.vlim
	grew := false
	defer func() {
		if grew {
			s.boundCoverLocked()
		}
	}()
	// The ranges to add are collected per key and added in one merge
	// (addMany) before returning: one ack request may acknowledge many
	// entries in any order, and adding them one by one costs O(n) each
	// below the vector's top range (issue 22). Runs before the deferred
	// bound above.
	var pend map[string][]seqRange
	flush := func() {
		for key, rs := range pend {
			if c.v.addMany(key, rs) {
				*changed, grew = true, true
				c.changed()
				s.dirty = true
			}
		}
		pend = nil
	}
	defer flush()
	add := func(k originKey) {
		// Another origin's entry goes into this region's scoped claim with
		// the origin_seq values right below it that are not for this
		// region (k.Skip), so those never hold a hole open here.
		if c.replicated && k.Region != "" {
			if pend == nil {
				pend = map[string][]seqRange{}
			}
			key := c.ownKey(self, k.Region)
			pend[key] = append(pend[key], seqRange{k.Seq - k.Skip, k.Seq})
		}
	}
	var missing []pos
	keep := c.newAcks[:0]
	for _, p := range c.newAcks {
		if k, known := c.origins[p]; known {
			add(k)
			continue
		}
		if _, retained := ml.seqOf[p.L]; !retained || !ml.lessLocked(s.markDelete, p) {
			continue // trimmed, or passed by the mark-delete (the walk below has it)
		}
		keep = append(keep, p)
		missing = append(missing, p)
	}
	c.newAcks = keep
	flush() // whole entries first: a batch ack of a covered entry is not kept
	keepB := c.newBatch[:0]
	for _, p := range c.newBatch {
		b := s.batchAcked[p]
		if b == nil {
			continue // acknowledged as a whole (newAcks has it), or passed
		}
		if k, known := c.origins[p]; known {
			if c.replicated && k.Region != "" && c.v.addBatchLim(c.ownKey(self, k.Region), k.Seq, b.words, lim) {
				*changed, grew = true, true
				c.changed()
				s.dirty = true
			}
			continue
		}
		if _, retained := ml.seqOf[p.L]; !retained || !ml.lessLocked(s.markDelete, p) {
			continue
		}
		keepB = append(keepB, p)
		missing = append(missing, p)
	}
	c.newBatch = keepB
	if _, retained := ml.seqOf[s.markDelete.L]; !retained {
		c.vfront = s.markDelete // nothing retained to translate up to it
	}
	for steps := 0; ml.lessLocked(c.vfront, s.markDelete); steps++ {
		if steps >= scanChunk {
			return pos{}, transMore
		}
		n, more := ml.nextLocked(c.vfront)
		if !more || ml.lessLocked(s.markDelete, n) {
			c.vfront = s.markDelete
			break
		}
		k, known := c.origins[n]
		if !known && c.replicated {
			return n, transRead
		}
		add(k)
		delete(c.origins, n)
		c.vfront = n
	}
	if len(missing) > 0 {
		return missing[0], transRead
	}
	return pos{}, transDone
}

// applyScan applies a grown cover to the backlog window: every entry after
// the mark-delete (up to coverScanWindow entries beyond it) whose key the
// cover covers is acknowledged.
func (s *subscription) applyScan(ctx context.Context, budget *int) error {
	s.mu.Lock()
	if s.cov.gen == s.cov.scanned && !s.cov.more {
		s.mu.Unlock()
		return nil
	}
	s.cov.more = false
	gen, epoch := s.cov.gen, s.readEpoch
	s.mu.Unlock()
	w := &scanWalk{epoch: epoch, gen: gen}
	for *budget > 0 {
		need, done, yield := s.scanStep(w)
		if done {
			s.mu.Lock()
			if s.readEpoch == w.epoch && s.cov.scanned < w.gen {
				s.cov.scanned = w.gen
			}
			s.mu.Unlock()
			return nil
		}
		if yield {
			continue // the locks were released between chunks
		}
		if err := s.readOrigins(ctx, need, maxReadBatch, budget); err != nil {
			if errors.Is(err, errNotYet) {
				return nil
			}
			return err
		}
	}
	return nil
}

// scanChunk bounds the entries one scan step walks while holding the
// subscription's and the managed ledger's locks (appends wait on the
// latter), so a large window is walked in slices.
const scanChunk = 2000

// scanWalk is an apply scan in progress.
type scanWalk struct {
	epoch, gen int64
	started    bool
	cur        pos
	gap        int
}

// scanStep walks up to scanChunk entries of the window with the keys
// known: it returns a position whose key must be read (need), done, or
// yield (a chunk walked: call again). A scan for the cover generation
// already fully scanned (new entries appended) goes on from where the last
// one stopped; any other starts at the mark-delete.
func (s *subscription) scanStep(w *scanWalk) (need pos, done, yield bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cov.on() {
		return pos{}, true, false
	}
	if s.readEpoch != w.epoch { // a seek meanwhile: start over
		*w = scanWalk{epoch: s.readEpoch, gen: s.cov.gen}
	}
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	c := &s.cov
	if !w.started {
		w.started = true
		w.cur, w.gap = s.markDelete, 0
		if c.scanValid && c.scanned == w.gen && w.gen == c.gen {
			if _, ok := ml.seqOf[c.scanPos.L]; ok && ml.lessLocked(w.cur, c.scanPos) {
				w.gap = int(ml.countAfterLocked(w.cur) - ml.countAfterLocked(c.scanPos))
				w.cur = c.scanPos
			}
		}
	} else if _, ok := ml.seqOf[w.cur.L]; !ok || !ml.lessLocked(s.markDelete, w.cur) {
		w.cur, w.gap = s.markDelete, 0 // the mark-delete passed it (or it was trimmed)
	}
	defer func() {
		c.scanPos, c.scanValid = w.cur, true
		s.afterAckLocked()
	}()
	for steps := 0; w.gap < coverScanWindow; steps++ {
		if steps >= scanChunk {
			return pos{}, false, true
		}
		n, ok := ml.nextLocked(w.cur)
		if !ok {
			return pos{}, true, false
		}
		k, known := c.origins[n]
		if !known {
			if _, acked := s.acked[n]; !acked {
				return n, false, false
			}
		} else if k.Region != "" && c.v.coversEntry(k, s.t.b.cfg.Region) {
			s.ackByCoverLocked(n)
			s.compactLocked()
		}
		w.cur = n
		if ml.lessLocked(s.markDelete, w.cur) {
			w.gap++
		} else {
			w.gap = 0
		}
	}
	return pos{}, true, false
}

// seekVector restarts the cursor: every entry counts unacknowledged except
// those v covers (v replaces the cover vector), delivery restarts from the
// first retained entry not covered (floor: a position known to have
// everything at or before it covered, or ml.beforeFirst). Consumers'
// pending entries are dropped (they will be redelivered if not covered).
// On a replicated subscription it also ships the reset (new reset epoch)
// to every region.
func (s *subscription) seekVector(v ackVector, floor pos) {
	s.mu.Lock()
	epoch, region := s.cov.epoch, s.cov.region
	repl := s.cov.replicated
	s.mu.Unlock()
	if repl {
		epoch, region = epoch+1, s.t.b.cfg.Region
	}
	s.seekVectorEpoch(v, floor, epoch, region)
}

// seekVectorEpoch is seekVector with the reset epoch given (a reset
// received from another region keeps its epoch).
func (s *subscription) seekVectorEpoch(v ackVector, floor pos, epoch int64, region string) {
	s.mu.Lock()
	ml := s.t.ml
	ml.mu.Lock()
	if _, ok := ml.seqOf[floor.L]; !ok {
		floor = ml.beforeFirstLocked()
	} else if ml.lessLocked(ml.lastPosLocked(), floor) {
		floor = ml.lastPosLocked()
	}
	s.markDelete = floor
	s.lastRead = floor
	s.acked = map[pos]struct{}{}
	s.redeliver = map[pos]struct{}{}
	s.redelivers = map[pos]int32{}
	for p, c := range s.pending {
		delete(s.pending, p)
		c.pending--
	}
	s.resetDispatchLocked()
	s.readEpoch++
	s.dirty = true
	c := &s.cov
	c.v = v.clone()
	s.boundCoverLocked()
	c.newAcks = nil
	c.newBatch = nil
	c.vfront = floor
	c.epoch, c.region = epoch, region
	c.gen++
	c.due = true
	c.scanValid = false
	c.changed()
	// Keys already known stay valid (a position's origin never changes);
	// those at or before the floor are dropped.
	for p := range c.origins {
		if !ml.lessLocked(floor, p) {
			delete(c.origins, p)
		}
	}
	repl := c.replicated
	ml.mu.Unlock()
	s.mu.Unlock()
	s.kick()
	if repl {
		s.t.subsync.notify()
	}
}

// joinCover adds w to the cover (a received vector); it reports whether
// the cover grew.
func (s *subscription) joinCover(w ackVector) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cov.v == nil {
		s.cov.v = ackVector{}
	}
	if !s.cov.v.joinLim(w, s.t.b.vlim) {
		return false
	}
	s.boundCoverLocked()
	s.cov.gen++
	s.cov.due = true
	s.cov.changed()
	s.dirty = true
	s.kick()
	return true
}

// retainPos is the position retention must keep entries after: the
// mark-delete, or the translation frontier when it lags (its entries'
// origin keys are still to be read).
func (s *subscription) retainPos() pos {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cov.on() {
		return s.markDelete
	}
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.lessLocked(s.cov.vfront, s.markDelete) {
		return s.cov.vfront
	}
	return s.markDelete
}

// untranslatedLocked counts the local acknowledgements not yet in the
// vector (individual ones, and entries the mark-delete passed beyond the
// translation frontier). Needs s.mu.
func (s *subscription) untranslatedLocked() int64 {
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	n := int64(len(s.cov.newAcks))
	if ml.lessLocked(s.cov.vfront, s.markDelete) {
		n += max(ml.countAfterLocked(s.cov.vfront)-ml.countAfterLocked(s.markDelete), 0)
	}
	return n
}

// coverExtLocked returns the cursor record fields of the cover state.
func (s *subscription) coverExtLocked(maxRanges int) cursorExt {
	c := &s.cov
	ext := cursorExt{Replicated: c.replicated, ResetEpoch: c.epoch, ResetRegion: c.region, Type: int32(c.typ)}
	if c.v != nil {
		ext.Cover = vectorToRecord(c.v, maxRanges)
		if ext.Cover == nil {
			ext.Cover = map[string]coverOrigin{}
		}
		vf := [2]int64{c.vfront.L, c.vfront.E}
		ext.VFront = &vf
	}
	return ext
}

// restoreCover sets the cover state of a subscription loaded from its
// cursor record; the individually acknowledged entries are translated
// again (idempotent).
func (s *subscription) restoreCover(ext cursorExt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.cov
	c.replicated = ext.Replicated
	c.epoch, c.region = ext.ResetEpoch, ext.ResetRegion
	c.typ = clientv1.SubscriptionType(ext.Type)
	c.v = vectorFromRecord(ext.Cover, s.t.b.vlim)
	if c.replicated && c.v == nil {
		c.v = ackVector{}
	}
	s.boundCoverLocked()
	c.vfront = s.markDelete
	if ext.VFront != nil {
		c.vfront = pos{ext.VFront[0], ext.VFront[1]}
	}
	if !c.on() {
		return
	}
	for p := range s.acked {
		c.noteAck(p)
	}
	for p := range s.batchAcked {
		c.noteBatch(p)
	}
	c.gen++
	c.due = true
	s.kick()
}

// regionNames interns the origin region names kept per remembered entry
// (a handful of distinct values), bounded by maxInterned.
var regionNames sync.Map

const maxInterned = 1024

var internedCount atomic.Int64

// internRegion returns a shared copy of the region name r.
func internRegion(r string) string {
	if v, ok := regionNames.Load(r); ok {
		return v.(string)
	}
	if internedCount.Load() >= maxInterned {
		return r
	}
	if v, loaded := regionNames.LoadOrStore(r, r); loaded {
		return v.(string)
	}
	internedCount.Add(1)
	return r
}

// latestVectorLocked is the vector of a new subscription at the latest
// position: per origin, the highest origin_seq already in the log (own
// region: the last local number; others: the highest replicated entry
// stored). Needs ml.mu.
func (ml *managedLedger) latestVectorLocked(self string) ackVector {
	v := ackVector{}
	if ml.localSeq > 0 {
		v.setMD(originStreamKey(self, ml.incarnation), ml.localSeq)
	}
	for name, p := range ml.dedup.byName {
		if isReplName(name) && p.stored > 0 {
			v.setMD(name[len(ReplDedupPrefix):], p.stored)
		}
	}
	return v
}
