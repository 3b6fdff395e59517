package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/metadata"
	"github.com/prometheus/client_golang/prometheus"
)

// Metadata key prefixes in the region's shard.
const (
	// managedLedgerPrefix + topic holds the topic's ledger list (mlRecord).
	managedLedgerPrefix = "managed-ledgers/"
	// cursorPrefix + topic + "/" + subscription holds a cursor (cursorRecord).
	cursorPrefix = "cursors/"
	// ownerPrefix + topic is the owner's ephemeral claim (ownerRecord).
	ownerPrefix = "owners/"
	// brokerPrefix + brokerID is a live broker's ephemeral registration.
	brokerPrefix = "brokers/"
)

// ledgerInfo is one ledger of a topic's list.
type ledgerInfo struct {
	ID int64 `json:"id"`
	// Seq orders the topic's ledgers: ledger IDs come from per-broker ID
	// batches and are not monotonic across owners.
	Seq int64 `json:"seq"`
	// Entries is -1 while the ledger is open for writes.
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	CreatedMs int64 `json:"created_ms"`
	ClosedMs  int64 `json:"closed_ms,omitempty"`
	// Messages is the number of messages of a closed ledger when the
	// broker that closed it knew every entry's count (msgcount.go); 0 =
	// unknown.
	Messages int64 `json:"messages,omitempty"`
}

// mlRecord is the stored managed ledger of one topic.
type mlRecord struct {
	Ledgers   []ledgerInfo `json:"ledgers"`
	NextSeq   int64        `json:"next_seq"`
	CreatedMs int64        `json:"created_ms"`
	// Producers is the dedup snapshot (see dedup.go): the most recently
	// used producers' state as of the ledgers with Seq <= DedupThrough.
	// Ledgers after DedupThrough are scanned when the topic is taken.
	Producers    map[string]dedupSnap `json:"producers,omitempty"`
	DedupThrough int64                `json:"dedup_through"`
	// Dedup is the sequence-only snapshot of earlier versions (read only).
	Dedup map[string]int64 `json:"dedup,omitempty"`
	// LocalSeq is the last local origin_seq given as of the dedup snapshot
	// (replication_seq.go); LocalSeqKnown is false in lists written before.
	LocalSeq      int64 `json:"local_seq,omitempty"`
	LocalSeqKnown bool  `json:"local_seq_known,omitempty"`
	// Incarnation is the origin incarnation of the LocalSeq counter,
	// allocated in the global shard when the list was created
	// (originstream.go); 0 in lists written before incarnations.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// TrimmedEntries counts the entries of the ledgers retention deleted
	// from the head of the list: with it an entry's origin_seq (see
	// originSeq) does not change when earlier ledgers go.
	TrimmedEntries int64 `json:"trimmed_entries"`
}

// pos is an entry position; E = -1 means "before the ledger's first entry".
type pos struct{ L, E int64 }

// appendReq is one entry waiting for the append loop.
type appendReq struct {
	data     []byte
	producer string
	firstSeq int64
	lastSeq  int64
	// local: produced in this region; the append loop gives it the next
	// local origin_seq (replication_seq.go). A local request may carry
	// its metadata and payload instead of data: the append loop then
	// encodes it once, with its origin_seq.
	local   bool
	md      *clientv1.EntryMetadata
	payload []byte
	// from is the origin-qualified dedup key of a replicated entry's
	// original producer, with its batch [fromFirst, fromLast]
	// (failover_dedup.go); "" for none.
	from                string
	fromFirst, fromLast int64
	// ident is the failover-identity dedup key of the entry's producer,
	// with its batch [identFirst, identLast] (ident_dedup.go); "" for none.
	ident                 string
	identFirst, identLast int64
	done                  func(p pos, err error)
}

type cachedEntry struct {
	p    pos
	data []byte
}

// managedLedger is a topic's log while this broker owns it.
type managedLedger struct {
	cfg    *Config
	key    string
	topic  string
	log    *slog.Logger
	store  LedgerStore
	opts   func() LedgerOptions
	notify func()
	onFail func(error)

	// pendingSlots is the back-pressure bound of the append queue: one
	// token per send queued but not yet taken by appendLoop (at most
	// MaxPendingSends). Its elements are zero-sized, so it costs no buffer
	// however large the bound: an idle topic pays nothing for it (the
	// queue itself, appendQ, grows only with the sends actually queued).
	pendingSlots chan struct{}
	// appendWake tells appendLoop that appendQ is not empty (capacity 1).
	appendWake chan struct{}
	// loopOnce starts appendLoop at the first send (an idle topic holds no
	// goroutine), or marks it never started at close.
	loopOnce sync.Once
	stop     chan struct{}
	loopDone chan struct{}

	// qmu guards appendQ and qStopped.
	qmu sync.Mutex
	// appendQ holds the queued sends in arrival order.
	appendQ []*appendReq
	// qStopped: the loop stopped (close); no send is queued any more.
	qStopped bool

	// listMu serializes the writes of the ledger list (rollover, retention,
	// close): each starts from the version the previous one returned, so a
	// version mismatch means another broker wrote the list, never this one
	// racing itself. Lock order: listMu, then mu.
	listMu sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	rec       mlRecord
	version   int64
	seqOf     map[int64]int64
	writer    LedgerWriter
	curLac    int64 // last confirmed entry of the current ledger
	curSize   int64
	curOpened time.Time
	failed    error
	readers   map[int64]LedgerReader
	cache     map[pos][]byte
	cacheFIFO []cachedEntry
	cacheSize int64
	// cacheTotal is the broker-wide cache size shared by every topic.
	cacheTotal *atomic.Int64
	dedup      *dedupTable
	lastWrite  time.Time
	// localSeq is the last local origin_seq given (replication_seq.go),
	// under origin incarnation incarnation (originstream.go).
	localSeq    int64
	incarnation uint64
	// msgs holds the known message counts per ledger (msgcount.go).
	msgs map[int64]*ledgerMsgs

	// lostScanned counts the lost entries a takeover scan skipped (may be
	// nil); set once before load.
	lostScanned prometheus.Counter
}

func newManagedLedger(cfg *Config, cacheTotal *atomic.Int64, topic string, log *slog.Logger, opts func() LedgerOptions, notify func(), onFail func(error)) *managedLedger {
	ml := &managedLedger{cacheTotal: cacheTotal,
		cfg: cfg, key: managedLedgerPrefix + topic, topic: topic, log: log, store: cfg.Ledgers,
		opts: opts, notify: notify, onFail: onFail,
		pendingSlots: make(chan struct{}, cfg.MaxPendingSends), appendWake: make(chan struct{}, 1),
		stop: make(chan struct{}), loopDone: make(chan struct{}),
		seqOf: map[int64]int64{}, readers: map[int64]LedgerReader{}, cache: map[pos][]byte{},
		dedup: newDedupTable(cfg.DedupMaxProducers),
	}
	ml.dedup.maxStreams = cfg.MaxOriginIncarnations
	return ml
}

// load reads (or creates) the ledger list, recovers the previous owner's
// last ledger (fencing it) and opens a new ledger. Only after load returns
// may the topic accept writes.
func (ml *managedLedger) load(ctx context.Context, create bool) error {
	kv, err := ml.cfg.Regional.Get(ctx, ml.key, metadata.ReadOptions{})
	var rec mlRecord
	version := int64(0)
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		if !create {
			return fmt.Errorf("%w: topic %s", ErrNotFound, ml.topic)
		}
		// A new origin_seq counter: a new incarnation, so that its numbers
		// never repeat an earlier list's (originstream.go).
		inc, ierr := ml.newIncarnation(ctx)
		if ierr != nil {
			return ierr
		}
		rec = mlRecord{CreatedMs: time.Now().UnixMilli(), DedupThrough: -1, Incarnation: inc, LocalSeqKnown: true}
		version = metadata.MustNotExist
	case err != nil:
		return fmt.Errorf("%w: read ledger list of %s: %v", ErrUnavailable, ml.topic, err)
	default:
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("broker: ledger list of %s is corrupt: %v", ml.topic, err)
		}
		version = kv.Version
	}
	dedup := newDedupTable(ml.cfg.DedupMaxProducers)
	dedup.maxStreams = ml.cfg.MaxOriginIncarnations
	localSeq := rec.LocalSeq
	// scanned: the message counts of the entries the scan reads (msgcount.go).
	var scanned map[int64]*ledgerMsgs
	dedup.restore(rec.Producers, rec.Dedup)
	rec.Dedup = nil
	// Recover every ledger still marked open (normally only the last):
	// fencing makes the previous owner unable to add to it.
	for i := range rec.Ledgers {
		li := &rec.Ledgers[i]
		if li.Entries >= 0 && li.Seq <= rec.DedupThrough {
			continue
		}
		var r LedgerReader
		if li.Entries < 0 {
			r, err = ml.store.OpenRecover(ctx, li.ID)
		} else {
			r, err = ml.store.Open(ctx, li.ID)
		}
		if err != nil {
			return fmt.Errorf("%w: recover ledger %d of %s: %v", ErrStorage, li.ID, ml.topic, err)
		}
		lac := r.LastAddConfirmed()
		// Scan the entries not covered by the dedup snapshot: their sizes and
		// the producers' last batches. Every producer found is tracked.
		// An entry that no replica holds intact (lost) is skipped: it must
		// not make the whole topic unloadable. Its subscriptions still stop
		// at it visibly (lost.go). Dedup cannot know the lost entry's producer
		// sequence: if it was its producer's last batch, a resend of it is
		// stored again (the original is gone; see docs/ARCHITECTURE.md).
		var size int64
		var lost []int64
		for first := int64(0); first <= lac; {
			last := min(first+499, lac)
			ents, err := r.Read(ctx, first, last)
			next := last + 1
			if err != nil {
				if !isLostEntry(err) {
					r.Close()
					return fmt.Errorf("%w: scan ledger %d of %s: %v", ErrStorage, li.ID, ml.topic, err)
				}
				// ents is the readable prefix; the entry after it is lost.
				bad := first
				if len(ents) > 0 {
					bad = ents[len(ents)-1].EntryID + 1
				}
				if len(lost) == 0 {
					ml.log.Warn("takeover scan: entry lost on every replica, skipped; subscriptions stop at it until an operator skips it",
						"ledger", li.ID, "entry", bad, "err", err,
						"dedup", "the producer sequence of this entry is unknown: a resend of it may be stored again",
						"hint", "meridian admin topics skip-lost")
				}
				lost = append(lost, bad)
				if ml.lostScanned != nil {
					ml.lostScanned.Inc()
				}
				next = bad + 1
			}
			first = next
			for _, e := range ents {
				size += int64(len(e.Data))
				// A replicated entry feeds its origin's pseudo-producer
				// (meridian.repl.<origin>, origin_seq): see dedupKey.
				if md, _, err := wire.DecodeEntry(e.Data); err == nil {
					scanned = noteCount(scanned, pos{li.ID, e.EntryID}, max(md.GetNumMessages(), 1))
					localSeq = observeLocalSeq(localSeq, rec.Incarnation, md)
					if name, first, hs, ok := dedupKey(md); ok {
						dedup.observe(name, first, hs, pos{li.ID, e.EntryID}, md.GetBrokerPublishTimeMs())
						if !md.GetReplicated() {
							dedup.bindScanned(name, md.GetProducerRole()) // producer_bind.go
						}
					}
					if name, first, hs, ok := originProducerKey(md); ok {
						dedup.observe(name, first, hs, pos{li.ID, e.EntryID}, md.GetBrokerPublishTimeMs())
					}
					if name, first, hs, ok := entryIdent(md); ok {
						dedup.observeIdent(name, first, hs, pos{li.ID, e.EntryID}, md.GetBrokerPublishTimeMs())
					}
				}
			}
		}
		r.Close()
		if len(lost) > 1 {
			// One line per ledger and takeover, not one per lost entry.
			ml.log.Warn("takeover scan: lost entries skipped", "ledger", li.ID, "count", len(lost),
				"first", lost[0], "last", lost[len(lost)-1])
		}
		if li.Entries < 0 {
			li.Entries = lac + 1
			li.Size = size
			li.ClosedMs = time.Now().UnixMilli()
			li.Messages = scanned[li.ID].total(li.Entries)
		}
	}
	localSeq = max(localSeq, initLocalSeq(&rec))
	o := ml.opts()
	w, err := ml.store.Create(ctx, LedgerOptions{Ensemble: o.Ensemble, WriteQuorum: o.WriteQuorum, AckQuorum: o.AckQuorum,
		Properties: map[string]string{"topic": ml.topic}})
	if err != nil {
		return fmt.Errorf("%w: create ledger for %s: %v", ErrStorage, ml.topic, err)
	}
	now := time.Now()
	rec.Ledgers = append(rec.Ledgers, ledgerInfo{ID: w.ID(), Seq: rec.NextSeq, Entries: -1, CreatedMs: now.UnixMilli()})
	rec.NextSeq++
	for _, r := range dedup.replRegions() {
		dedup.pruneIncarnations(r)
	}
	dedup.order()
	// Everything before the new ledger has been seen.
	rec.Producers, rec.DedupThrough = dedup.snapshot(rec.Ledgers, rec.NextSeq-2)
	rec.LocalSeq, rec.LocalSeqKnown = localSeq, true
	val, _ := json.Marshal(&rec)
	var kv2 metadata.KV
	if version == metadata.MustNotExist {
		kv2, err = createKey(ctx, ml.cfg.Regional, ml.key, val, 0)
	} else {
		kv2, err = ml.cfg.Regional.Put(ctx, ml.key, val, version, 0)
	}
	if err != nil {
		_ = w.Close(context.Background())
		if !errors.Is(err, metadata.ErrUnknownOutcome) {
			_ = ml.store.Delete(context.Background(), w.ID())
		}
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return fmt.Errorf("%w: ledger list of %s changed while loading (another owner?)", ErrTopicFenced, ml.topic)
		}
		return fmt.Errorf("%w: write ledger list of %s: %v", ErrUnavailable, ml.topic, err)
	}
	ml.mu.Lock()
	ml.rec = rec
	ml.version = kv2.Version
	ml.writer = w
	ml.curLac = -1
	ml.curSize = 0
	ml.curOpened = now
	ml.dedup = dedup
	ml.localSeq = localSeq
	ml.incarnation = rec.Incarnation
	ml.msgs = scanned
	ml.rebuildSeqLocked()
	ml.mu.Unlock()
	// appendLoop starts at the first send (enqueue).
	ml.log.Info("topic loaded", "ledgers", len(rec.Ledgers), "ledger", w.ID(), "producers", dedup.len())
	return nil
}

func (ml *managedLedger) rebuildSeqLocked() {
	ml.seqOf = make(map[int64]int64, len(ml.rec.Ledgers))
	for _, li := range ml.rec.Ledgers {
		ml.seqOf[li.ID] = li.Seq
	}
}

// isCurrentLocked reports whether ledger index i is the one being written.
func (ml *managedLedger) countLocked(i int) int64 {
	li := ml.rec.Ledgers[i]
	if ml.writer != nil && li.ID == ml.writer.ID() {
		return ml.curLac + 1
	}
	if li.Entries < 0 {
		return 0
	}
	return li.Entries
}

// enqueue hands a send to the append loop. It blocks while
// MaxPendingSends sends are queued (back-pressure) until ctx ends. Only
// after load returned.
func (ml *managedLedger) enqueue(ctx context.Context, r *appendReq) error {
	if err := ml.reserveSlot(ctx); err != nil {
		return err
	}
	return ml.enqueueReserved(r)
}

// reserveSlot waits for room in the append queue (the MaxPendingSends
// back-pressure) and takes one slot, which enqueueReserved then uses or
// releaseSlot gives back. It fails when the ledger failed or the topic
// closes, or with ctx's error.
func (ml *managedLedger) reserveSlot(ctx context.Context) error {
	ml.mu.Lock()
	if ml.failed != nil {
		err := ml.failed
		ml.mu.Unlock()
		return err
	}
	ml.mu.Unlock()
	select {
	case ml.pendingSlots <- struct{}{}:
		return nil
	case <-ml.stop:
		return ErrTopicNotOwned
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryReserveSlot is reserveSlot without waiting: false when the queue is
// full.
func (ml *managedLedger) tryReserveSlot() bool {
	select {
	case ml.pendingSlots <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseSlot gives back a slot taken by reserveSlot and not used.
func (ml *managedLedger) releaseSlot() { <-ml.pendingSlots }

// enqueueReserved queues r in the slot its caller reserved (never
// blocks); on an error the slot is released and r is not queued.
func (ml *managedLedger) enqueueReserved(r *appendReq) error {
	ml.qmu.Lock()
	if ml.qStopped {
		ml.qmu.Unlock()
		<-ml.pendingSlots
		return ErrTopicNotOwned
	}
	ml.appendQ = append(ml.appendQ, r)
	ml.qmu.Unlock()
	ml.loopOnce.Do(func() { go ml.appendLoop() })
	select {
	case ml.appendWake <- struct{}{}:
	default: // a wake is already pending
	}
	return nil
}

// dequeue takes the oldest queued send and frees its slot; nil when the
// queue is empty.
func (ml *managedLedger) dequeue() *appendReq {
	ml.qmu.Lock()
	if len(ml.appendQ) == 0 {
		ml.qmu.Unlock()
		return nil
	}
	r := ml.appendQ[0]
	ml.appendQ[0] = nil
	ml.appendQ = ml.appendQ[1:]
	if len(ml.appendQ) == 0 {
		// Drop the backing array: the next burst starts small, and a topic
		// gone idle keeps no queue memory.
		ml.appendQ = nil
	}
	ml.qmu.Unlock()
	<-ml.pendingSlots
	return r
}

// dupResult is checkDup's answer for a duplicate send.
type dupResult struct {
	// stored: the original is stored (else it is still in flight).
	stored bool
	// known: id and batchIndex are where the send's first message was
	// first stored.
	known      bool
	id         pos
	batchIndex int32
}

// checkDup tells whether the batch [seq, highest] of producer was already
// queued or stored (dup=true, see dupResult). Otherwise it records the
// batch as queued.
func (ml *managedLedger) checkDup(producer string, seq, highest int64) (dup bool, r dupResult) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	dup, r.stored, r.id, r.batchIndex, r.known = ml.dedup.check(producer, seq, highest, time.Now().UnixMilli())
	return dup, r
}

// unpush forgets a queued batch that will not be stored, so that its
// resend is not mistaken for a duplicate still in flight.
func (ml *managedLedger) unpush(producer string, highest int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	ml.dedup.unpush(producer, highest)
}

// lastSequence returns the highest stored sequence ID of producer (-1 none).
func (ml *managedLedger) lastSequence(producer string) int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.dedup.lastSequence(producer)
}

func (ml *managedLedger) appendLoop() {
	defer close(ml.loopDone)
	for {
		select {
		case <-ml.stop:
			ml.drainFailed(ErrTopicNotOwned)
			return
		case <-ml.appendWake:
		}
		for {
			select {
			case <-ml.stop:
				ml.drainFailed(ErrTopicNotOwned)
				return
			default:
			}
			r := ml.dequeue()
			if r == nil {
				break
			}
			ml.mu.Lock()
			failed := ml.failed
			need := ml.needRolloverLocked()
			w := ml.writer
			ml.mu.Unlock()
			if failed != nil {
				r.done(pos{}, failed)
				continue
			}
			if need {
				if err := ml.rollover(); err != nil {
					ml.fail(err)
					r.done(pos{}, err)
					continue
				}
				ml.mu.Lock()
				w = ml.writer
				ml.mu.Unlock()
			}
			if r.local {
				if err := ml.assignLocalSeq(r); err != nil {
					r.done(pos{}, err)
					continue
				}
			}
			ml.appendOne(w, r)
		}
	}
}

// drainFailed stops the queue (later sends are refused) and fails every
// queued send with err.
func (ml *managedLedger) drainFailed(err error) {
	ml.qmu.Lock()
	ml.qStopped = true
	q := ml.appendQ
	ml.appendQ = nil
	ml.qmu.Unlock()
	for _, r := range q {
		<-ml.pendingSlots
		r.done(pos{}, err)
	}
}

func (ml *managedLedger) appendOne(w LedgerWriter, r *appendReq) {
	lid := w.ID()
	w.AppendAsync(r.data, func(eid int64, err error) {
		if err != nil {
			err = fmt.Errorf("%w: add to ledger %d: %v", ErrStorage, lid, err)
			ml.fail(err)
			r.done(pos{}, err)
			return
		}
		p := pos{lid, eid}
		ml.mu.Lock()
		if ml.writer != nil && ml.writer.ID() == lid && eid > ml.curLac {
			ml.curLac = eid
			ml.curSize += int64(len(r.data))
		}
		ml.lastWrite = time.Now()
		if r.producer != "" {
			ml.dedup.stored(r.producer, r.firstSeq, r.lastSeq, p, ml.lastWrite.UnixMilli())
		}
		if r.from != "" {
			ml.dedup.storedFrom(r.from, r.fromFirst, r.fromLast, p, ml.lastWrite.UnixMilli())
		}
		if r.ident != "" {
			ml.dedup.storedIdent(r.ident, r.identFirst, r.identLast, p, ml.lastWrite.UnixMilli())
		}
		ml.cacheLocked(p, r.data)
		ml.noteEntryDataLocked(p, r.data)
		ml.mu.Unlock()
		r.done(p, nil)
		ml.notify()
	})
}

func (ml *managedLedger) cacheLocked(p pos, data []byte) {
	if ml.cfg.TailCacheBytes <= 0 {
		return
	}
	ml.cache[p] = data
	ml.cacheFIFO = append(ml.cacheFIFO, cachedEntry{p, data})
	ml.cacheSize += int64(len(data))
	ml.cacheTotal.Add(int64(len(data)))
	perTopic := ml.cfg.TailCacheBytes / 8
	for len(ml.cacheFIFO) > 0 && (ml.cacheSize > perTopic || ml.cacheTotal.Load() > ml.cfg.TailCacheBytes) {
		old := ml.cacheFIFO[0]
		ml.cacheFIFO[0] = cachedEntry{}
		ml.cacheFIFO = ml.cacheFIFO[1:]
		delete(ml.cache, old.p)
		ml.cacheSize -= int64(len(old.data))
		ml.cacheTotal.Add(-int64(len(old.data)))
	}
}

func (ml *managedLedger) needRolloverLocked() bool {
	n := ml.curLac + 1
	if n == 0 {
		return false
	}
	return n >= ml.cfg.RolloverEntries || ml.curSize >= ml.cfg.RolloverBytes || time.Since(ml.curOpened) >= ml.cfg.RolloverAge
}

// rollover closes the current ledger and starts a new one; the ledger list
// is updated with compare-and-set so that a broker that lost the topic
// cannot extend it.
func (ml *managedLedger) rollover() error {
	ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.OperationTimeout)
	defer cancel()
	ml.listMu.Lock()
	defer ml.listMu.Unlock()
	ml.mu.Lock()
	old := ml.writer
	ml.mu.Unlock()
	if err := old.Close(ctx); err != nil {
		return fmt.Errorf("%w: close ledger %d: %v", ErrStorage, old.ID(), err)
	}
	o := ml.opts()
	w, err := ml.store.Create(ctx, LedgerOptions{Ensemble: o.Ensemble, WriteQuorum: o.WriteQuorum, AckQuorum: o.AckQuorum,
		Properties: map[string]string{"topic": ml.topic}})
	if err != nil {
		return fmt.Errorf("%w: create ledger: %v", ErrStorage, err)
	}
	now := time.Now()
	ml.mu.Lock()
	rec := ml.cloneRecLocked()
	last := &rec.Ledgers[len(rec.Ledgers)-1]
	last.Entries = old.LastAddConfirmed() + 1
	last.Size = ml.curSize
	last.Messages = ml.msgs[last.ID].total(last.Entries)
	last.ClosedMs = now.UnixMilli()
	rec.Ledgers = append(rec.Ledgers, ledgerInfo{ID: w.ID(), Seq: rec.NextSeq, Entries: -1, CreatedMs: now.UnixMilli()})
	rec.NextSeq++
	rec.Producers, rec.DedupThrough = ml.dedup.snapshot(rec.Ledgers, last.Seq)
	rec.LocalSeq, rec.LocalSeqKnown = ml.localSeq, true
	version := ml.version
	ml.mu.Unlock()
	val, _ := json.Marshal(&rec)
	kv, err := ml.cfg.Regional.Put(ctx, ml.key, val, version, 0)
	if err != nil {
		_ = w.Close(context.Background())
		if errors.Is(err, metadata.ErrVersionMismatch) {
			_ = ml.store.Delete(context.Background(), w.ID())
			return fmt.Errorf("%w: ledger list of %s changed under us", ErrTopicFenced, ml.topic)
		}
		return fmt.Errorf("%w: update ledger list: %v", ErrUnavailable, err)
	}
	ml.mu.Lock()
	ml.rec = rec
	ml.version = kv.Version
	ml.writer = w
	ml.curLac = -1
	ml.curSize = 0
	ml.curOpened = now
	ml.rebuildSeqLocked()
	ml.mu.Unlock()
	ml.log.Debug("ledger rolled over", "closed", old.ID(), "new", w.ID())
	return nil
}

func (ml *managedLedger) cloneRecLocked() mlRecord {
	rec := ml.rec
	rec.Ledgers = append([]ledgerInfo(nil), ml.rec.Ledgers...)
	return rec
}

// fail marks the ledger unusable and tells the topic (once).
func (ml *managedLedger) fail(err error) {
	ml.mu.Lock()
	first := ml.failed == nil
	if first {
		ml.failed = err
	}
	ml.mu.Unlock()
	if first {
		ml.log.Warn("managed ledger failed; unloading topic", "err", err)
		go ml.onFail(err)
	}
}

// close stops the append loop and, when graceful, closes the current ledger
// and records it closed.
func (ml *managedLedger) close(ctx context.Context, graceful, killed bool) {
	select {
	case <-ml.stop:
	default:
		close(ml.stop)
	}
	// A loop never started (no send since load) is marked done here; a
	// send queued meanwhile is failed like the loop would.
	ml.loopOnce.Do(func() {
		ml.drainFailed(ErrTopicNotOwned)
		close(ml.loopDone)
	})
	<-ml.loopDone
	ml.mu.Lock()
	w := ml.writer
	failed := ml.failed
	if ml.failed == nil {
		ml.failed = ErrTopicNotOwned
	}
	readers := ml.readers
	ml.readers = map[int64]LedgerReader{}
	ml.cacheTotal.Add(-ml.cacheSize)
	ml.cache, ml.cacheFIFO, ml.cacheSize = map[pos][]byte{}, nil, 0
	ml.mu.Unlock()
	for _, r := range readers {
		r.Close()
	}
	if w == nil || killed {
		return
	}
	if !graceful || failed != nil {
		// Best effort: release the writer's resources; the ledger is (or
		// will be) recovered by the next owner.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = w.Close(cctx)
		cancel()
		return
	}
	if err := w.Close(ctx); err != nil {
		return
	}
	ml.listMu.Lock()
	defer ml.listMu.Unlock()
	ml.mu.Lock()
	rec := ml.cloneRecLocked()
	last := &rec.Ledgers[len(rec.Ledgers)-1]
	last.Entries = w.LastAddConfirmed() + 1
	last.Size = ml.curSize
	last.Messages = ml.msgs[last.ID].total(last.Entries)
	last.ClosedMs = time.Now().UnixMilli()
	rec.Producers, rec.DedupThrough = ml.dedup.snapshot(rec.Ledgers, last.Seq)
	rec.LocalSeq, rec.LocalSeqKnown = ml.localSeq, true
	version := ml.version
	ml.mu.Unlock()
	val, _ := json.Marshal(&rec)
	if _, err := ml.cfg.Regional.Put(ctx, ml.key, val, version, 0); err != nil {
		ml.log.Warn("record closed ledger", "err", err)
	}
}

// ---- positions ----

// keyLocked orders positions: (ledger sequence, entry). Ledgers no longer
// in the list (deleted by retention) sort before every retained one.
func (ml *managedLedger) keyLocked(p pos) (int64, int64) {
	s, ok := ml.seqOf[p.L]
	if !ok {
		return -1, p.E
	}
	return s, p.E
}

func (ml *managedLedger) lessLocked(a, b pos) bool {
	as, ae := ml.keyLocked(a)
	bs, be := ml.keyLocked(b)
	return as < bs || as == bs && ae < be
}

// nextLocked returns the position after p, if an entry is stored there.
func (ml *managedLedger) nextLocked(p pos) (pos, bool) {
	s, ok := ml.seqOf[p.L]
	if !ok {
		s = -1
	}
	for i, li := range ml.rec.Ledgers {
		n := ml.countLocked(i)
		if li.Seq == s && ok {
			if p.E+1 < n {
				return pos{li.ID, p.E + 1}, true
			}
			continue
		}
		if li.Seq > s && n > 0 {
			return pos{li.ID, 0}, true
		}
	}
	return pos{}, false
}

// firstPosLocked is the position before the first retained entry.
func (ml *managedLedger) beforeFirstLocked() pos {
	if len(ml.rec.Ledgers) == 0 {
		return pos{-1, -1}
	}
	return pos{ml.rec.Ledgers[0].ID, -1}
}

// lastPosLocked is the last stored entry (or before-first if none).
func (ml *managedLedger) lastPosLocked() pos {
	for i := len(ml.rec.Ledgers) - 1; i >= 0; i-- {
		if n := ml.countLocked(i); n > 0 {
			return pos{ml.rec.Ledgers[i].ID, n - 1}
		}
	}
	return ml.beforeFirstLocked()
}

// countAfterLocked counts stored entries strictly after p.
func (ml *managedLedger) countAfterLocked(p pos) int64 {
	s, e := ml.keyLocked(p)
	var total int64
	for i, li := range ml.rec.Ledgers {
		n := ml.countLocked(i)
		switch {
		case li.Seq < s:
		case li.Seq == s:
			total += max(0, n-(e+1))
		default:
			total += n
		}
	}
	return total
}

// totals returns entries and bytes stored in the retained ledgers.
func (ml *managedLedger) totals() (entries, bytes int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for i, li := range ml.rec.Ledgers {
		entries += ml.countLocked(i)
		if ml.writer != nil && li.ID == ml.writer.ID() {
			bytes += ml.curSize
		} else {
			bytes += li.Size
		}
	}
	return
}

// read returns up to max consecutive entries starting at p (which must be
// stored), all from p's ledger. On a storage error it also returns the
// entries before the one that failed.
func (ml *managedLedger) read(ctx context.Context, p pos, maxN int) ([]LedgerEntry, error) {
	ml.mu.Lock()
	idx := -1
	for i, li := range ml.rec.Ledgers {
		if li.ID == p.L {
			idx = i
			break
		}
	}
	if idx < 0 {
		ml.mu.Unlock()
		return nil, fmt.Errorf("%w: ledger %d is no longer retained", ErrNotFound, p.L)
	}
	n := ml.countLocked(idx)
	last := min(p.E+int64(maxN)-1, n-1)
	if last < p.E {
		ml.mu.Unlock()
		return nil, nil
	}
	// Serve from the tail cache while it has the entries in a row.
	var out []LedgerEntry
	for e := p.E; e <= last; e++ {
		d, ok := ml.cache[pos{p.L, e}]
		if !ok {
			break
		}
		out = append(out, LedgerEntry{LedgerID: p.L, EntryID: e, Data: d})
	}
	if len(out) > 0 {
		ml.mu.Unlock()
		return out, nil
	}
	r := ml.readers[p.L]
	ml.mu.Unlock()
	if r == nil {
		var err error
		r, err = ml.store.Open(ctx, p.L)
		if err != nil {
			return nil, fmt.Errorf("%w: open ledger %d: %v", ErrStorage, p.L, err)
		}
		ml.mu.Lock()
		if old := ml.readers[p.L]; old != nil {
			ml.mu.Unlock()
			r.Close()
			r = old
		} else {
			ml.readers[p.L] = r
			ml.mu.Unlock()
		}
	}
	if last > r.LastAddConfirmed() && !r.IsClosed() {
		if _, err := r.ReadLastAddConfirmed(ctx); err != nil {
			return nil, fmt.Errorf("%w: read LAC of ledger %d: %v", ErrStorage, p.L, err)
		}
		if lac := r.LastAddConfirmed(); last > lac {
			last = lac
		}
		if last < p.E {
			return nil, nil
		}
	}
	ents, err := r.Read(ctx, p.E, last)
	if err != nil {
		// ents holds the readable entries before the failed one (see
		// LedgerReader.Read); the error keeps the ledger client's sentinel.
		return ents, fmt.Errorf("%w: read ledger %d entries %d..%d: %w", ErrStorage, p.L, p.E, last, err)
	}
	return ents, nil
}

// dropReader closes and forgets the cached reader of a ledger.
func (ml *managedLedger) dropReader(id int64) {
	ml.mu.Lock()
	r := ml.readers[id]
	delete(ml.readers, id)
	ml.mu.Unlock()
	if r != nil {
		r.Close()
	}
}
