package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// maxReadBatch bounds the entries one dispatch round reads.
const maxReadBatch = 100

// consumer is one connected consumer of a subscription.
type consumer struct {
	name     string
	priority int32
	addr     string
	// out carries responses to the stream writer; its capacity is the
	// permit cap, so a push under permits never blocks.
	out      chan *clientv1.ConsumeResponse
	done     chan struct{}
	doneOnce sync.Once
	// hold bounds the bytes queued on out (deliverybudget.go); roomWait
	// marks a goroutine waiting for it to have room again.
	hold     *deliveryHold
	roomWait atomic.Bool
	// guarded by subscription.mu:
	permits  int64
	pending  int64
	active   bool
	msgsOut  int64
	bytesOut int64
	// ks is the consumer's Key_Shared policy (nil: AUTO_SPLIT, in order);
	// set before addConsumer, then read-only.
	ks *clientv1.KeySharedPolicy
}

// closeDone ends the consumer's stream (idempotent).
func (c *consumer) closeDone() { c.doneOnce.Do(func() { close(c.done) }) }

// send queues a response without blocking; false when the queue is full.
func (c *consumer) send(r *clientv1.ConsumeResponse) bool {
	select {
	case c.out <- r:
		return true
	default:
		return false
	}
}

// subscription is a durable cursor plus its connected consumers.
type subscription struct {
	t    *topic
	name string
	key  string
	log  *slog.Logger
	// nonDurable marks a reader's subscription (seek_reader.go): never
	// persisted, holding no retention, gone with its consumer. Set before
	// the subscription is published in topic.subs, then read-only.
	nonDurable bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	// startOnce starts dispatchLoop at the first kick, or (in close) marks
	// a never-started dispatcher done: an idle subscription holds no
	// goroutine (docs/perf/scale.md).
	startOnce sync.Once

	// persistMu serializes the writes of the cursor key (see
	// cursorpersist.go) and guards unsure. Lock order: persistMu, then mu.
	persistMu sync.Mutex
	unsure    *unsureWrite // a cursor write of unknown outcome

	// mu guards the fields below. Lock order: subscription.mu, then
	// managedLedger.mu.
	mu         sync.Mutex
	typ        clientv1.SubscriptionType
	consumers  []*consumer
	rr         int
	markDelete pos
	acked      map[pos]struct{}
	lastRead   pos // last position handed to the dispatcher's read path
	pending    map[pos]*consumer
	redeliver  map[pos]struct{}
	redelivers map[pos]int32
	// switchHold: until then a Failover subscription dispatches to no one
	// (an active consumer change lets the previous one acknowledge what it
	// holds first; see Config.FailoverSwitchDelay).
	switchHold  time.Time
	createdMs   int64
	version     int64 // cursor key version (compare-and-set guard)
	dirty       bool
	lastPersist time.Time
	deleted     bool
	readEpoch   int64
	// avgEntry is the mean entry size of the last dispatch read (0: none
	// yet); it sizes the next read (readbudget.go).
	avgEntry int64
	blocked  *blockedRead   // dispatch cannot read its next entry (see lost.go)
	cov      coverState     // cover vector and replicated-subscription state (subcover.go)
	ks       keySharedState // Key_Shared routing (keyshared.go)
	delay    delayIndex     // delayed entries held back (delayed.go)

	// bl holds the backlog operation counters (backlogops.go).
	bl backlogSubState
	// batchAcked holds the acknowledged batch indexes of entries after
	// mark-delete not acknowledged as a whole (batchacks.go).
	batchAcked map[pos]*batchBits
	// deadLettered counts messages acknowledged with Ack.dead_letter;
	// redelivered counts redelivered messages, sampled for the rate.
	deadLettered int64
	redelivered  int64
	// poison counts entries acknowledged with Ack.poison_reason, by
	// reason (poison.go; keys from a fixed set).
	poison    map[string]int64
	createdAt time.Time
	rdAt      time.Time
	rdBase    int64
	rdRate    float64
}

func newSubscription(t *topic, name string, md pos, acked map[pos]struct{}, createdMs, version int64) *subscription {
	s := &subscription{
		t: t, name: name, key: cursorPrefix + t.name.String() + "/" + name,
		log:  t.log.With("subscription", name),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		markDelete: md, acked: acked, lastRead: md, pending: map[pos]*consumer{},
		redeliver: map[pos]struct{}{}, redelivers: map[pos]int32{}, createdMs: createdMs, version: version,
		lastPersist: time.Now(), batchAcked: map[pos]*batchBits{}, createdAt: time.Now(),
	}
	if s.acked == nil {
		s.acked = map[pos]struct{}{}
	}
	return s
}

// kick wakes the dispatcher, starting it on the first kick: dispatchLoop
// waits for a wake before any work, so starting it late changes nothing
// but the goroutine an idle subscription would hold.
func (s *subscription) kick() {
	s.startOnce.Do(func() { go s.dispatchLoop() })
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// addConsumer attaches c with the given type; it enforces Exclusive,
// type consistency and maxConsumers (0: no limit; limits.go).
func (s *subscription) addConsumer(c *consumer, typ clientv1.SubscriptionType, maxConsumers int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return fmt.Errorf("%w: subscription %s was deleted", ErrNotFound, s.name)
	}
	if typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_KEY_SHARED {
		if len(s.consumers) > 0 && s.typ != typ {
			return fmt.Errorf("%w: subscription %s is connected as %s, not %s", ErrTypeMismatch, s.name, s.typ, typ)
		}
		if err := s.admitKeySharedLocked(c); err != nil {
			return err
		}
	}
	if len(s.consumers) > 0 {
		if s.typ != typ {
			return fmt.Errorf("%w: subscription %s is connected as %s, not %s", ErrTypeMismatch, s.name, s.typ, typ)
		}
		if typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE {
			return fmt.Errorf("%w: exclusive subscription %s already has consumer %s", ErrConsumerBusy, s.name, s.consumers[0].name)
		}
		for _, o := range s.consumers {
			if o.name == c.name {
				return fmt.Errorf("%w: consumer name %q already connected to subscription %s", ErrConsumerBusy, c.name, s.name)
			}
		}
	}
	if limitReached(maxConsumers, len(s.consumers)) {
		return limitError("max_consumers_per_subscription", maxConsumers, fmt.Sprintf("subscription %s already has %d consumers", s.name, maxConsumers))
	}
	s.typ = typ
	s.cov.typ = typ
	s.consumers = append(s.consumers, c)
	s.updateActiveLocked()
	s.rebuildKeySharedLocked()
	s.kick()
	return nil
}

// updateActiveLocked picks the Failover/Exclusive active consumer (lowest
// priority, then name) and tells consumers whose state changed.
func (s *subscription) updateActiveLocked() {
	if s.sharedLikeLocked() {
		return
	}
	sort.SliceStable(s.consumers, func(i, j int) bool {
		a, b := s.consumers[i], s.consumers[j]
		return a.priority < b.priority || a.priority == b.priority && a.name < b.name
	})
	delay := s.t.b.cfg.FailoverSwitchDelay
	for i, c := range s.consumers {
		active := i == 0
		if c.active != active {
			// The old active consumer's unacknowledged entries go to the new
			// one. A Failover consumer that is still connected first gets
			// the switch delay to acknowledge them: nothing is dispatched
			// meanwhile (so the new one still receives in order), and what
			// it has not acknowledged by then is redelivered.
			if !active && s.typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER && delay > 0 && c.pending > 0 {
				s.switchHold = time.Now().Add(delay)
				time.AfterFunc(delay, func() { s.endSwitchHold(c) })
			} else if !active {
				s.redeliverFromLocked(c)
			}
			c.active = active
			if s.typ == clientv1.SubscriptionType_SUBSCRIPTION_TYPE_FAILOVER {
				c.send(&clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_ActiveChange{ActiveChange: &clientv1.ActiveConsumerChange{IsActive: active}}})
			}
		}
	}
}

// endSwitchHold ends a failover switch delay: what prev (demoted, and
// still connected) has not acknowledged goes to the active consumer.
func (s *subscription) endSwitchHold(prev *consumer) {
	s.mu.Lock()
	if !prev.active {
		s.redeliverFromLocked(prev) // a no-op if prev was removed meanwhile
	}
	if !time.Now().Before(s.switchHold) {
		s.switchHold = time.Time{}
	}
	s.mu.Unlock()
	s.kick()
}

// removeConsumer detaches c; its unacknowledged entries are redelivered.
func (s *subscription) removeConsumer(c *consumer) {
	s.mu.Lock()
	for i, o := range s.consumers {
		if o == c {
			s.consumers = append(s.consumers[:i], s.consumers[i+1:]...)
			break
		}
	}
	s.redeliverFromLocked(c)
	c.active = false
	s.updateActiveLocked()
	s.rebuildKeySharedLocked()
	s.mu.Unlock()
	s.kick()
}

func (s *subscription) redeliverFromLocked(c *consumer) {
	for p, o := range s.pending {
		if o == c {
			delete(s.pending, p)
			s.redeliver[p] = struct{}{}
		}
	}
	c.pending = 0
}

// flow grants permits.
func (s *subscription) flow(c *consumer, n uint32) {
	s.mu.Lock()
	c.permits = min(c.permits+int64(n), int64(cap(c.out))-c.pendingOut())
	s.mu.Unlock()
	s.kick()
}

func (c *consumer) pendingOut() int64 { return int64(len(c.out)) }

// redeliverUnacked moves c's delivered-but-unacknowledged entries (all, or
// those listed) back to the dispatch queue.
func (s *subscription) redeliverUnacked(c *consumer, ids []*clientv1.MessageId) {
	s.mu.Lock()
	if len(ids) == 0 {
		s.redeliverFromLocked(c)
	} else {
		for _, id := range ids {
			p := pos{id.GetLedgerId(), id.GetEntryId()}
			if s.pending[p] == c {
				delete(s.pending, p)
				c.pending--
				s.redeliver[p] = struct{}{}
			}
		}
	}
	s.mu.Unlock()
	s.kick()
}

// ack applies an acknowledgement.
func (s *subscription) ack(ids []*clientv1.MessageId, cumulative bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cumulative {
		if s.sharedLikeLocked() && len(s.consumers) > 0 {
			return fmt.Errorf("%w: cumulative ack on %s subscription %s; use individual acks", ErrNotAllowed, s.typ, s.name)
		}
		if len(ids) != 1 {
			return fmt.Errorf("%w: cumulative ack needs exactly 1 message ID, got %d", ErrInvalidArgument, len(ids))
		}
	}
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for _, id := range ids {
		p := pos{id.GetLedgerId(), id.GetEntryId()}
		if _, ok := ml.seqOf[p.L]; !ok {
			continue // a ledger already trimmed (or never ours): nothing to ack
		}
		if p.E < 0 || ml.lessLocked(ml.lastPosLocked(), p) {
			return fmt.Errorf("%w: message ID %d:%d is not a stored entry", ErrInvalidArgument, p.L, p.E)
		}
		if !ml.lessLocked(s.markDelete, p) {
			continue
		}
		if cumulative {
			s.markDelete = p
			s.dropThroughLocked(p)
		} else {
			s.acked[p] = struct{}{}
			s.cov.noteAck(p)
			if c, ok := s.pending[p]; ok {
				delete(s.pending, p)
				c.pending--
			}
			delete(s.redeliver, p)
			delete(s.redelivers, p)
			delete(s.batchAcked, p)
		}
	}
	s.compactLocked()
	s.dirty = true
	s.afterAckLocked()
	if s.isKeySharedLocked() && len(s.redeliver) > 0 {
		s.kick() // set-aside entries may wait for this ack (draining)
	}
	return nil
}

// dropThroughLocked forgets the per-entry state of every entry at or
// before p: mark-delete moved there (a cumulative ack or a backlog
// operation). Needs ml.mu held too.
func (s *subscription) dropThroughLocked(p pos) {
	ml := s.t.ml
	for q := range s.acked {
		if !ml.lessLocked(p, q) {
			delete(s.acked, q)
		}
	}
	for q, c := range s.pending {
		if !ml.lessLocked(p, q) {
			delete(s.pending, q)
			c.pending--
		}
	}
	for q := range s.redeliver {
		if !ml.lessLocked(p, q) {
			delete(s.redeliver, q)
		}
	}
	for q := range s.redelivers {
		if !ml.lessLocked(p, q) {
			delete(s.redelivers, q)
		}
	}
	for q := range s.batchAcked {
		if !ml.lessLocked(p, q) {
			delete(s.batchAcked, q)
		}
	}
}

// compactLocked advances mark-delete over individually acknowledged
// entries. Needs ml.mu held too.
func (s *subscription) compactLocked() {
	ml := s.t.ml
	for {
		n, ok := ml.nextLocked(s.markDelete)
		if !ok {
			return
		}
		if _, acked := s.acked[n]; !acked {
			return
		}
		delete(s.acked, n)
		delete(s.redelivers, n)
		delete(s.batchAcked, n)
		s.markDelete = n
	}
}

// reset moves the cursor so that the next entry delivered is after md.
func (s *subscription) reset(md pos) {
	s.mu.Lock()
	ml := s.t.ml
	ml.mu.Lock()
	s.markDelete = md
	s.lastRead = md
	s.acked = map[pos]struct{}{}
	s.redeliver = map[pos]struct{}{}
	s.batchAcked = map[pos]*batchBits{}
	for p, c := range s.pending {
		delete(s.pending, p)
		c.pending--
	}
	s.resetDispatchLocked()
	s.readEpoch++
	s.dirty = true
	s.cov.resetLocked(md)
	ml.mu.Unlock()
	s.mu.Unlock()
	s.kick()
}

// backlog counts entries after mark-delete not acknowledged individually.
func (s *subscription) backlog() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	n := ml.countAfterLocked(s.markDelete) - int64(len(s.acked))
	return max(n, 0)
}

func (s *subscription) dispatchLoop() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		for {
			if err := s.coverWork(); err != nil {
				s.log.Debug("cover vector work", "err", err)
			}
			progressed, err := s.dispatchOnce()
			if err != nil {
				// Logged at a bounded rate; retried with backoff, or at once
				// when woken (an ack or a skip may have moved past it).
				select {
				case <-s.stop:
					return
				case <-time.After(s.dispatchFailed(err)):
				case <-s.wake:
				}
				continue
			}
			if !progressed {
				break
			}
		}
	}
}

// permitsLocked sums the permits of consumers that may receive now.
func (s *subscription) permitsLocked() int64 {
	var n int64
	limit := int64(s.t.b.cfg.MaxUnackedPerConsumer)
	if !s.switchHold.IsZero() && time.Now().Before(s.switchHold) {
		return 0 // a failover switch delay: endSwitchHold kicks the dispatcher
	}
	for _, c := range s.consumers {
		if !s.sharedLikeLocked() && !c.active || c.pending >= limit || c.permits <= 0 || !s.hasRoomLocked(c) {
			continue
		}
		n += c.permits
	}
	return n
}

// pickLocked chooses the consumer for the next entry (nil: none has permits).
func (s *subscription) pickLocked() *consumer {
	if len(s.consumers) == 0 {
		return nil
	}
	limit := int64(s.t.b.cfg.MaxUnackedPerConsumer)
	if !s.sharedLikeLocked() {
		for _, c := range s.consumers {
			if c.active && c.permits > 0 && c.pending < limit && s.hasRoomLocked(c) {
				return c
			}
		}
		return nil
	}
	for i := 0; i < len(s.consumers); i++ {
		c := s.consumers[(s.rr+i)%len(s.consumers)]
		if c.permits > 0 && c.pending < limit && s.hasRoomLocked(c) {
			s.rr = (s.rr + i + 1) % len(s.consumers)
			return c
		}
	}
	return nil
}

// dispatchOnce runs one dispatch round: due delayed entries join the
// replay set; the replay set goes first, oldest first; then new entries
// are read. It reports whether it made progress (the loop runs it again).
func (s *subscription) dispatchOnce() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.t.b.cfg.OperationTimeout)
	defer cancel()
	// Read before s.mu: the topic's lock is never taken under it.
	delayOn := s.t.delayedDeliveryEnabled() && !s.nonDurable
	s.mu.Lock()
	s.matureDelayedLocked(delayOn)
	permits := s.permitsLocked()
	if permits == 0 {
		s.mu.Unlock()
		return false, nil
	}
	epoch := s.readEpoch
	if len(s.redeliver) > 0 {
		ks := s.isKeySharedLocked()
		sent, err := s.replayLocked(ctx, permits, epoch) // releases s.mu
		if err != nil || sent || !ks {
			return sent, err
		}
		// Key_Shared: nothing in the replay set can go now (its keys'
		// consumers have no permit, or the keys are draining); other keys
		// go on with new entries.
		s.mu.Lock()
		if s.readEpoch != epoch {
			s.mu.Unlock()
			return true, nil
		}
		if permits = s.permitsLocked(); permits == 0 {
			s.mu.Unlock()
			return false, nil
		}
	}
	if len(s.redeliver) >= s.maxSetAsideLocked() || len(s.delay.at) >= s.maxDelayedLocked() {
		s.mu.Unlock()
		return false, nil // back-pressure: no reading ahead past the bounds
	}
	ml := s.t.ml
	ml.mu.Lock()
	next, ok := s.nextToReadLocked()
	ml.mu.Unlock()
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	n, est := s.readSize(min(permits, maxReadBatch))
	release, err := s.t.b.dispatchReads.hold(ctx, est) // readbudget.go
	if err != nil {
		return false, fmt.Errorf("wait for max_inflight_dispatch_read_bytes: %w", err) // retried after a pause
	}
	defer release()
	ents, err := ml.read(ctx, next, n)
	s.noteRead(ents)
	if errors.Is(err, ErrNotFound) {
		// The ledger was trimmed under us: skip to what is retained.
		s.mu.Lock()
		if s.readEpoch == epoch {
			ml.mu.Lock()
			if _, ok := ml.seqOf[s.lastRead.L]; !ok {
				s.lastRead = ml.beforeFirstLocked()
			}
			ml.mu.Unlock()
		}
		s.mu.Unlock()
		return true, nil
	}
	if err != nil && len(ents) == 0 {
		return false, s.readBlocked(next, err)
	}
	if len(ents) == 0 {
		return false, nil
	}
	// With err set, ents are the readable entries before the unreadable
	// one: deliver them; the next round stops (visibly) at that entry.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readProgressedLocked(ents[0])
	if s.readEpoch != epoch {
		return true, nil
	}
	defer s.armDelayTimerLocked()
	if s.isKeySharedLocked() {
		return s.routeReadLocked(ents, delayOn), nil
	}
	now := time.Now().UnixMilli()
	sent := false
	for _, e := range ents {
		p := pos{e.LedgerID, e.EntryID}
		c := s.pickLocked()
		if c == nil {
			break
		}
		if delayOn && len(s.delay.at) >= s.maxDelayedLocked() {
			break
		}
		s.lastRead = p
		sent = true
		ml.mu.Lock()
		done := !ml.lessLocked(s.markDelete, p)
		ml.mu.Unlock()
		if _, acked := s.acked[p]; acked || done {
			continue
		}
		if s.coverEntryLocked(e) {
			continue // acknowledged by the cover vector: not delivered
		}
		if delayOn {
			if at := deliverAt(e); at > now {
				s.holdLocked(p, at)
				continue
			}
		}
		if !s.deliverLocked(c, e, 0) {
			break // its bytes did not fit after all: it waits in the replay set
		}
	}
	return sent, nil
}

// deliverAt is the entry's deliver_at_ms (0 for an undecodable entry,
// which deliverLocked skips).
func deliverAt(e LedgerEntry) int64 {
	md, _, err := wire.DecodeEntry(e.Data)
	if err != nil {
		return 0
	}
	return md.GetDeliverAtMs()
}

// routeReadLocked dispatches newly read entries of a Key_Shared
// subscription: each goes to its key's consumer when it may take it now,
// else into the replay set (never past its bound). Needs s.mu.
func (s *subscription) routeReadLocked(ents []LedgerEntry, delayOn bool) bool {
	ml := s.t.ml
	now := time.Now().UnixMilli()
	r := s.newKSRoundLocked()
	// Keys with set-aside entries: a new entry must not overtake them.
	for p := range s.redeliver {
		if slot, ok := s.ks.slots[p]; ok {
			r.blocked[slot] = true
		}
	}
	maxAside, maxDelayed := s.maxSetAsideLocked(), s.maxDelayedLocked()
	progressed := false
	for _, e := range ents {
		p := pos{e.LedgerID, e.EntryID}
		ml.mu.Lock()
		done := !ml.lessLocked(s.markDelete, p)
		ml.mu.Unlock()
		if _, acked := s.acked[p]; acked || done {
			s.lastRead = p
			progressed = true
			continue
		}
		md, _, derr := wire.DecodeEntry(e.Data)
		if derr != nil {
			md = nil
		}
		if delayOn && md.GetDeliverAtMs() > now && len(s.delay.at) >= maxDelayed {
			break
		}
		if len(s.redeliver) >= maxAside {
			break
		}
		s.lastRead = p
		progressed = true
		if s.coverEntryLocked(e) {
			continue // acknowledged by the cover vector: not delivered
		}
		slot := s.slotOfLocked(e, md)
		if delayOn && md.GetDeliverAtMs() > now {
			s.holdLocked(p, md.GetDeliverAtMs())
			continue
		}
		c := s.routeLocked(r, slot)
		if c == nil {
			s.setAsideLocked(p)
			continue
		}
		if !s.deliverLocked(c, e, 0) {
			r.blocked[slot] = true // set aside; the key waits for the bytes
			continue
		}
		r.delivered(c, slot)
	}
	s.pruneKeySharedLocked()
	return progressed
}

// replayLocked delivers entries of the replay set (redeliveries, matured
// delayed entries, Key_Shared entries set aside), oldest first. Called
// with s.mu held; returns with it released.
func (s *subscription) replayLocked(ctx context.Context, permits int64, epoch int64) (bool, error) {
	ml := s.t.ml
	ks := s.isKeySharedLocked()
	ml.mu.Lock()
	ps := make([]pos, 0, len(s.redeliver))
	for p := range s.redeliver {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ml.lessLocked(ps[i], ps[j]) })
	ml.mu.Unlock()
	var cand []pos
	if ks {
		// Choose, without reading, the entries that can go now.
		r := s.newKSRoundLocked()
		for _, p := range ps {
			if int64(len(cand)) >= permits || len(cand) >= maxReadBatch {
				break
			}
			slot, known := s.ks.slots[p]
			if !known {
				cand = append(cand, p) // read to learn its key
				continue
			}
			if c := s.routeLocked(r, slot); c != nil {
				r.used[c]++
				cand = append(cand, p)
			}
		}
		if len(cand) == 0 {
			s.mu.Unlock()
			return false, nil
		}
	} else {
		cand = ps[:min(int64(len(ps)), permits)]
	}
	n, est := s.readSizeLocked(int64(len(cand)))
	cand = cand[:n]
	s.mu.Unlock()
	release, err := s.t.b.dispatchReads.hold(ctx, est) // readbudget.go
	if err != nil {
		return false, fmt.Errorf("wait for max_inflight_dispatch_read_bytes: %w", err)
	}
	defer release()
	var ents []LedgerEntry
	for _, p := range cand {
		e, err := ml.read(ctx, p, 1)
		if errors.Is(err, ErrNotFound) || err == nil && len(e) == 0 {
			s.mu.Lock()
			delete(s.redeliver, p)
			s.mu.Unlock()
			continue
		}
		if err != nil {
			return false, s.readBlocked(p, err)
		}
		ents = append(ents, e...)
	}
	s.noteRead(ents)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readEpoch != epoch {
		return true, nil
	}
	var r *ksRound
	if ks {
		r = s.newKSRoundLocked()
	}
	sent := false
	for _, e := range ents {
		p := pos{e.LedgerID, e.EntryID}
		if _, ok := s.redeliver[p]; !ok {
			continue
		}
		var c *consumer
		var slot int32
		if ks {
			slot = s.slotOfLocked(e, nil)
			if c = s.routeLocked(r, slot); c == nil {
				continue // stays set aside; its key is blocked for this round
			}
		} else if c = s.pickLocked(); c == nil {
			break
		}
		delete(s.redeliver, p)
		if s.coverEntryLocked(e) {
			continue // acknowledged by the cover vector meanwhile
		}
		n := s.redelivers[p]
		_, fresh := s.ks.fresh[p] // set aside, never delivered: not a redelivery
		if !fresh {
			n++
		}
		if !s.deliverLocked(c, e, n) {
			if ks {
				r.blocked[slot] = true
				continue
			}
			break // back in the replay set: its bytes did not fit
		}
		if fresh {
			delete(s.ks.fresh, p)
		} else {
			s.redelivers[p] = n
		}
		if ks {
			r.delivered(c, slot)
		}
		sent = true
	}
	return sent || len(ents) == 0 && len(cand) > 0, nil
}

// deliverLocked pushes one entry to c under one of its permits. It reports
// false when c's delivery bytes had no room (the entry is put in the
// replay set); true when the entry went, or needed no delivery.
func (s *subscription) deliverLocked(c *consumer, e LedgerEntry, redeliveries int32) bool {
	p := pos{e.LedgerID, e.EntryID}
	md, payload, err := wire.DecodeEntry(e.Data)
	if err != nil {
		// Not a Meridian entry: it cannot be delivered; count it consumed so
		// the subscription does not stall on it.
		s.log.Error("undecodable entry skipped", "ledger", p.L, "entry", p.E, "err", err)
		s.acked[p] = struct{}{}
		return true
	}
	if !md.GetReplicated() && md.GetOriginLedgerId() == 0 && md.GetOriginEntryId() == 0 {
		// Locally produced: the origin position is the local position (it
		// is only known after the add, so it is filled in here).
		md.OriginLedgerId, md.OriginEntryId = p.L, p.E
	}
	md.ProducerRole = "" // the binding's, not the consumers' (producer_bind.go)
	ml := s.t.ml
	ml.mu.Lock()
	ml.noteMsgsLocked(p, max(md.GetNumMessages(), 1))
	ml.mu.Unlock()
	var skip []int32
	if b := s.batchAcked[p]; b != nil {
		if int64(b.count) >= int64(max(md.GetNumMessages(), 1)) {
			// Every message acknowledged by index (the whole-entry ack was
			// lost): acknowledge the entry instead of delivering it.
			ml.mu.Lock()
			s.ackWholeLocked(p)
			s.compactLocked()
			s.afterAckLocked()
			ml.mu.Unlock()
			return true
		}
		skip = b.indexes()
	}
	msg := &clientv1.ConsumeResponse{Kind: &clientv1.ConsumeResponse_Message{Message: &clientv1.Message{
		MessageId:         &clientv1.MessageId{LedgerId: p.L, EntryId: p.E},
		Metadata:          md,
		Payload:           payload,
		RedeliveryCount:   redeliveries,
		AckedBatchIndexes: skip,
	}}}
	size := deliverySize(msg)
	if !c.hold.take(size) {
		s.redeliver[p] = struct{}{}
		s.hasRoomLocked(c) // arms the wake-up for when it has room
		return false
	}
	if !c.send(msg) {
		c.hold.release(size)
		s.redeliver[p] = struct{}{}
		c.permits = 0
		return true
	}
	c.permits--
	c.pending++
	c.msgsOut += int64(md.GetNumMessages())
	c.bytesOut += int64(len(payload))
	s.pending[p] = c
	if redeliveries > 0 {
		s.redelivered += int64(md.GetNumMessages()) - int64(len(skip))
	}
	s.t.countOut(md.GetNumMessages(), len(payload))
	return true
}

// hasRoomLocked reports whether c's delivery budgets have room. When one
// is full it starts (once per consumer) a goroutine that kicks the
// dispatcher when that level next releases bytes, or c goes.
func (s *subscription) hasRoomLocked(c *consumer) bool {
	full, wake := c.hold.blocked()
	if !full {
		return true
	}
	if c.roomWait.CompareAndSwap(false, true) {
		go func() {
			select {
			case <-wake:
			case <-c.done:
			case <-s.stop:
			}
			c.roomWait.Store(false)
			s.kick()
		}()
	}
	return false
}

// slowestMarkDelete is read by retention.
func (s *subscription) markDeletePos() pos {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.markDelete
}

// close stops dispatch; consumers are told by their streams ending.
func (s *subscription) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.startOnce.Do(func() { close(s.done) }) // never kicked: no dispatcher to wait for
	<-s.done
	s.mu.Lock()
	cs := append([]*consumer(nil), s.consumers...)
	s.mu.Unlock()
	for _, c := range cs {
		c.closeDone()
	}
}
