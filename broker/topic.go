package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
)

// producer is one connected producer.
type producer struct {
	name string
	// ident is the producer's failover-identity dedup key ("" for none,
	// ident_dedup.go) and identity the identity it gave.
	ident, identity string
	addr            string
	out             chan *clientv1.ProduceResponse
	done            chan struct{}
	once            sync.Once
	msgs            atomic.Int64
	// refused is set by the first quota refusal (refuse).
	refused atomic.Pointer[error]
	// schemaVersion is the registry version of the producer's schema (0 =
	// none; schema.go), stamped on its entries.
	schemaVersion int32
	// role is the authenticated role its dedup key is bound to, and
	// bound whether names are bound at all (security on;
	// producer_bind.go).
	role  string
	bound bool
}

func (p *producer) close() { p.once.Do(func() { close(p.done) }) }

// refuse makes every later send of the producer's stream fail with err
// (see handleSend: a quota refusal must not let later batches overtake the
// refused one).
func (p *producer) refuse(err error) { p.refused.CompareAndSwap(nil, &err) }

// refusedErr is the error refuse recorded, or nil.
func (p *producer) refusedErr() error {
	if e := p.refused.Load(); e != nil {
		return fmt.Errorf("%w (an earlier send of this stream was refused; reconnect and resend from it)", *e)
	}
	return nil
}

// topic is a topic owned by this broker.
type topic struct {
	b    *Server
	name TopicName
	log  *slog.Logger
	ml   *managedLedger

	stop chan struct{}
	// jobs is the topic's periodic work in the broker's scheduler
	// (topicjobs.go).
	jobs topicJobs

	subCreateMu sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	producers map[string]*producer
	subs      map[string]*subscription
	closing   bool
	policies  *clientv1.NamespacePolicies

	// killed marks a topic stopped by Server.Kill: nothing more is written.
	killed atomic.Bool

	// replicators holds the topic's replicators (replication.go).
	replicators topicRepl
	// repl is the replication receiving state (replapply.go).
	repl replState
	// subsync ships the replicated subscriptions (subsync.go).
	subsync subSync
	// backlog is the TTL / backlog quota pass state (backlogops.go, ttl.go).
	backlog backlogTopicState

	// sendBytes bounds the payload bytes of sends without a receipt
	// (cfg.MaxPendingSendBytes, sendbudget.go).
	sendBytes *byteBudget

	msgsIn, bytesIn, msgsOut, bytesOut atomic.Int64
	rateMu                             sync.Mutex
	rateAt                             time.Time
	rateBase                           [4]int64
	rates                              [4]float64
}

func newTopic(b *Server, name TopicName, pol *clientv1.NamespacePolicies) *topic {
	t := &topic{
		b: b, name: name, log: b.log.With("topic", name.String()),
		stop:      make(chan struct{}),
		producers: map[string]*producer{}, subs: map[string]*subscription{}, policies: pol,
		rateAt:    time.Now(),
		sendBytes: newByteBudget(b.cfg.MaxPendingSendBytes),
	}
	t.ml = newManagedLedger(&b.cfg, &b.cacheBytes, name.String(), t.log, t.ledgerOptions, t.notify, t.onLedgerFailed)
	if b.metrics != nil {
		t.ml.lostScanned = b.metrics.takeoverLostEntries
	}
	return t
}

func (t *topic) ledgerOptions() LedgerOptions {
	t.mu.Lock()
	pol := t.policies
	t.mu.Unlock()
	e, w, a := t.b.quorums(pol)
	return LedgerOptions{Ensemble: e, WriteQuorum: w, AckQuorum: a}
}

// load recovers the managed ledger and the cursors.
func (t *topic) load(ctx context.Context, create bool) error {
	if err := t.ml.load(ctx, create); err != nil {
		return err
	}
	prefix := cursorPrefix + t.name.String() + "/"
	page := metadata.Page{}
	for {
		res, err := t.b.cfg.Regional.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			t.closeLoadedSubs()
			t.ml.close(ctx, false, false)
			return fmt.Errorf("%w: list cursors: %v", ErrUnavailable, err)
		}
		for _, kv := range res.KVs {
			name := kv.Key[len(prefix):]
			if strings.Contains(name, "/") {
				continue // a cursor of a deeper topic (prefix/x/sub)
			}
			// Fence the cursor before using it: the previous owner, if it
			// still runs, can no longer write it.
			fenced, err := t.fenceCursor(ctx, kv)
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				t.closeLoadedSubs()
				t.ml.close(ctx, false, false)
				return err
			}
			md, acked, created, err := decodeCursor(fenced.Value, t.b.cfg.MaxIndividualAcks)
			if err != nil {
				t.log.Error("cursor skipped", "subscription", name, "err", err)
				continue
			}
			ext, _ := decodeCursorExt(fenced.Value)
			sub := newSubscription(t, name, md, acked, created, fenced.Version)
			sub.restoreCover(ext)
			sub.restoreBatchAcks(ext)
			t.subs[name] = sub
		}
		if !res.More || len(res.KVs) == 0 {
			break
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	// Cursors whose mark-delete ledger is unknown are before everything.
	t.startJobs() // topicjobs.go
	return nil
}

// closeLoadedSubs stops the dispatchers of the subscriptions made by a
// load that fails.
func (t *topic) closeLoadedSubs() {
	for name, s := range t.subs {
		s.close()
		delete(t.subs, name)
	}
}

func (t *topic) notify() {
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.cov.appended.Store(true)
		s.kick()
	}
	t.replicators.kick()
}

func (t *topic) onLedgerFailed(err error) {
	t.b.unloadTopic(t, false, err)
}

func (t *topic) countOut(msgs int32, bytes int) {
	t.msgsOut.Add(int64(msgs))
	t.bytesOut.Add(int64(bytes))
	t.b.metrics.out(t.name.NamespaceName(), int(msgs), bytes)
}

// stopped reports whether close has begun.
func (t *topic) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

func (t *topic) persistCursors(force bool) {
	ctx, cancel := context.WithTimeout(context.Background(), t.b.cfg.OperationTimeout)
	defer cancel()
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		if err := s.persist(ctx, force); err != nil {
			t.log.Warn("persist cursor", "subscription", s.name, "err", err)
			if errors.Is(err, ErrTopicFenced) {
				go t.b.unloadTopic(t, false, err)
				return
			}
		}
	}
}

func (t *topic) updateRates() {
	t.rateMu.Lock()
	defer t.rateMu.Unlock()
	now := time.Now()
	dt := now.Sub(t.rateAt).Seconds()
	if dt < 1 {
		return
	}
	cur := [4]int64{t.msgsIn.Load(), t.bytesIn.Load(), t.msgsOut.Load(), t.bytesOut.Load()}
	for i := range cur {
		t.rates[i] = float64(cur[i]-t.rateBase[i]) / dt
	}
	t.rateBase = cur
	t.rateAt = now
}

// refreshPolicies reads the topic's effective policies again (namespace,
// prefixes, topic override: policies.go).
func (t *topic) refreshPolicies(ctx context.Context) {
	pol, err := t.b.effectivePolicies(ctx, t.name)
	if err != nil {
		return
	}
	t.setPolicies(pol)
}

// setPolicies gives the topic new effective policies; a new policy object
// has the backlog pass look at it at once (topicjobs.go).
func (t *topic) setPolicies(pol *clientv1.NamespacePolicies) {
	t.mu.Lock()
	changed := t.policies != pol
	t.policies = pol
	t.mu.Unlock()
	if changed {
		t.policiesChanged()
	}
}

// runRetention deletes whole ledgers that every cursor has passed and that
// are outside the namespace's retention (time and size). The ledger being
// written is never deleted.
func (t *topic) runRetention(ctx context.Context) error {
	t.mu.Lock()
	pol := t.policies
	subs := make([]*subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	mds := make([]pos, 0, len(subs))
	for _, s := range subs {
		if s.nonDurable {
			continue // readers hold no retention
		}
		mds = append(mds, s.retainPos())
	}
	retTime := time.Duration(pol.GetRetentionTimeSeconds()) * time.Second
	retSize := pol.GetRetentionSizeBytes()
	ml := t.ml
	// Serialized with rollover and close, which also write the list.
	ml.listMu.Lock()
	ml.mu.Lock()
	if ml.failed != nil || ml.writer == nil {
		ml.mu.Unlock()
		ml.listMu.Unlock()
		return nil
	}
	now := time.Now()
	var remaining int64
	for i, li := range ml.rec.Ledgers {
		if li.ID == ml.writer.ID() {
			remaining += ml.curSize
		} else if i >= 0 {
			remaining += li.Size
		}
	}
	var drop []ledgerInfo
	for _, li := range ml.rec.Ledgers {
		if li.ID == ml.writer.ID() || li.Entries < 0 {
			break
		}
		consumed := true
		if li.Entries > 0 {
			last := pos{li.ID, li.Entries - 1}
			for _, md := range mds {
				if ml.lessLocked(md, last) {
					consumed = false
					break
				}
			}
		}
		if !consumed {
			break
		}
		withinTime := pol.GetRetentionTimeSeconds() < 0 || now.Sub(time.UnixMilli(li.ClosedMs)) < retTime
		withinSize := retSize < 0 || remaining <= retSize
		if withinTime || withinSize {
			break
		}
		drop = append(drop, li)
		remaining -= li.Size
	}
	if len(drop) == 0 {
		ml.mu.Unlock()
		ml.listMu.Unlock()
		return nil
	}
	rec := ml.cloneRecLocked()
	rec.Ledgers = rec.Ledgers[len(drop):]
	for _, li := range drop {
		rec.TrimmedEntries += li.Entries
	}
	version := ml.version
	ml.mu.Unlock()
	val, _ := json.Marshal(&rec)
	kv, err := t.b.cfg.Regional.Put(ctx, ml.key, val, version, 0)
	if err != nil {
		ml.listMu.Unlock()
		if errors.Is(err, metadata.ErrVersionMismatch) {
			go t.b.unloadTopic(t, false, fmt.Errorf("%w: ledger list changed during retention", ErrTopicFenced))
		}
		return err
	}
	ml.mu.Lock()
	// Ledgers appended meanwhile (rollover) are impossible: rollover holds
	// listMu too.
	ml.rec = rec
	ml.version = kv.Version
	ml.rebuildSeqLocked()
	ml.mu.Unlock()
	ml.listMu.Unlock()
	for _, li := range drop {
		ml.dropReader(li.ID)
		if err := t.b.cfg.Ledgers.Delete(ctx, li.ID); err != nil {
			t.log.Warn("delete ledger", "ledger", li.ID, "err", err)
		}
		t.log.Info("retention deleted ledger", "ledger", li.ID, "entries", li.Entries, "bytes", li.Size)
	}
	t.b.metrics.ledgersDeleted.Add(float64(len(drop)))
	return nil
}

// getOrCreateSub returns the subscription, creating it at the initial
// position when absent.
func (t *topic) getOrCreateSub(ctx context.Context, name string, initial clientv1.InitialPosition, mustCreate bool) (*subscription, bool, error) {
	return t.getOrCreateSubOpts(ctx, name, subCreate{initial: initial, mustCreate: mustCreate})
}

// subCreate says how getOrCreateSubOpts creates a subscription.
type subCreate struct {
	initial    clientv1.InitialPosition
	mustCreate bool
	// mustExist refuses to create it (allow_auto_subscription_creation
	// off for a consumer's subscribe; limits.go).
	mustExist bool
	// replicated asks for a replicated subscription (the namespace policy
	// replicate_subscriptions makes every one replicated; never the
	// replicators' cursors).
	replicated bool
	// cover, when set, makes the subscription start at the earliest entry
	// with this cover vector (a subscription created from another
	// region's update), with the reset epoch/region given.
	cover      ackVector
	epoch      int64
	region     string
	typ        clientv1.SubscriptionType
	fromRemote bool
}

// getOrCreateSubOpts is getOrCreateSub with the replicated-subscription
// options.
func (t *topic) getOrCreateSubOpts(ctx context.Context, name string, o subCreate) (*subscription, bool, error) {
	initial, mustCreate := o.initial, o.mustCreate
	// One creation at a time per topic, so two consumers subscribing to a
	// new subscription at once both get it.
	t.subCreateMu.Lock()
	defer t.subCreateMu.Unlock()
	t.mu.Lock()
	if s, ok := t.subs[name]; ok {
		t.mu.Unlock()
		if mustCreate {
			return nil, false, fmt.Errorf("%w: subscription %s on %s", ErrAlreadyExists, name, t.name)
		}
		return s, false, nil
	}
	if o.mustExist {
		t.mu.Unlock()
		return nil, false, fmt.Errorf("%w: subscription %s of %s does not exist and allow_auto_subscription_creation is false: create it with the admin API", ErrNotFound, name, t.name)
	}
	countable := !isReplName(name) && !o.fromRemote
	if lim := effectiveLimit(policyField(t.policies, func(p *clientv1.NamespacePolicies) *int32 { return p.MaxSubscriptionsPerTopic }), t.b.cfg.MaxSubscriptionsPerTopic); countable && limitReached(lim, t.clientSubsLocked()) {
		t.mu.Unlock()
		return nil, false, limitError("max_subscriptions_per_topic", lim, fmt.Sprintf("%s already has %d subscriptions", t.name, lim))
	}
	t.mu.Unlock()
	replicated := !isReplName(name) && (o.replicated || o.fromRemote || t.currentPolicies().GetReplicateSubscriptions())
	var cov ackVector
	t.ml.mu.Lock()
	var md pos
	switch {
	case o.fromRemote:
		md = t.ml.beforeFirstLocked()
		cov = o.cover.clone()
	case initial == clientv1.InitialPosition_INITIAL_POSITION_EARLIEST:
		md = t.ml.beforeFirstLocked()
		if replicated {
			cov = ackVector{}
		}
	default:
		md = t.ml.lastPosLocked()
		if replicated {
			// The start position is local: the entries before it are
			// skipped here, never acknowledged in the vector (which other
			// regions join), so the vector starts empty and the
			// translation frontier at the start (issue 20 item 2).
			cov = ackVector{}
		}
	}
	t.ml.mu.Unlock()
	created := time.Now().UnixMilli()
	key := cursorPrefix + t.name.String() + "/" + name
	ext := cursorExt{Replicated: replicated, ResetEpoch: o.epoch, ResetRegion: o.region, Type: int32(o.typ)}
	if cov != nil {
		ext.Cover = vectorToRecord(cov, t.b.cfg.MaxIndividualAcks)
		ext.VFront = &[2]int64{md.L, md.E}
	}
	kv, err := createKey(ctx, t.b.cfg.Regional, key, encodeCursorExt(md, nil, created, 1, ext), 0)
	if err != nil {
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return nil, false, fmt.Errorf("%w: a cursor for subscription %s already exists in metadata but is not loaded; unload the topic and retry", ErrUnavailable, name)
		}
		return nil, false, fmt.Errorf("%w: create cursor: %v", ErrUnavailable, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return nil, false, ErrTopicNotOwned
	}
	s := newSubscription(t, name, md, nil, created, kv.Version)
	if replicated && !o.fromRemote {
		t.subsync.removeTomb(name)
	}
	if replicated {
		// Start the subscription senders now rather than at the next
		// reconciliation.
		t.b.repl.topicLoaded(t)
	}
	if cov != nil {
		s.restoreCover(ext)
		s.mu.Lock()
		s.cov.v = cov
		s.boundCoverLocked()
		s.mu.Unlock()
	}
	t.subs[name] = s
	t.b.metrics.subscriptions.WithLabelValues(t.name.NamespaceName()).Inc()
	return s, true, nil
}

// subscription returns the topic's subscription name, or ErrNotFound.
func (t *topic) subscription(name string) (*subscription, error) {
	t.mu.Lock()
	s, ok := t.subs[name]
	t.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: subscription %s on %s", ErrNotFound, name, t.name)
	}
	return s, nil
}

// deleteSub removes a subscription and its cursor.
func (t *topic) deleteSub(ctx context.Context, name string, force bool) error {
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	n := len(s.consumers)
	s.mu.Unlock()
	if n > 0 && !force {
		return fmt.Errorf("%w: subscription %s has %d connected consumers", ErrNotAllowed, name, n)
	}
	if err := s.deleteCursor(ctx); err != nil {
		if errors.Is(err, ErrTopicFenced) {
			go t.b.unloadTopic(t, false, err)
		}
		return err
	}
	s.mu.Lock()
	repl, typ := s.cov.replicated, s.cov.typ
	s.mu.Unlock()
	if repl {
		// Deleted in every region: the senders ship the deletion.
		t.subsync.addTomb(name, typ)
	}
	t.mu.Lock()
	delete(t.subs, name)
	t.mu.Unlock()
	s.close()
	if !s.nonDurable {
		t.b.metrics.subscriptions.WithLabelValues(t.name.NamespaceName()).Dec()
	}
	return nil
}

// close stops everything; graceful persists cursors and closes the ledger.
func (t *topic) close(ctx context.Context, graceful bool) {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return
	}
	t.closing = true
	prods := make([]*producer, 0, len(t.producers))
	for _, p := range t.producers {
		prods = append(prods, p)
	}
	t.mu.Unlock()
	close(t.stop)
	t.stopJobs()
	t.replicators.stopAll()
	t.subsync.stopAll()
	for _, p := range prods {
		p.close()
	}
	t.ml.close(ctx, graceful, t.killed.Load())
	switch {
	case graceful:
		t.persistCursors(true)
	case !t.killed.Load() && t.b.ownsTopic(ctx, t.name.String()):
		// Unloaded after a failure (an add failed, ...) while this broker
		// still owns the topic: the acknowledgements held in memory are
		// still this broker's to persist. A topic that moved is fenced
		// (ownsTopic is false, and its cursors' versions moved anyway).
		t.persistCursors(false)
	}
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.close()
	}
	t.waitJobs()
}

// subList returns the topic's subscriptions.
func (t *topic) subList() []*subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*subscription, 0, len(t.subs))
	for _, s := range t.subs {
		out = append(out, s)
	}
	return out
}
