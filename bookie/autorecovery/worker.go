package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Worker repairs under-replicated ledgers: it claims a marked ledger with an
// ephemeral lock, replaces each lost bookie segment by segment (copy first,
// then swap by compare-and-set), and deletes the mark. Run any number per
// region; they share the work through the locks. Safe for concurrent use.
type Worker struct {
	cfg  WorkerConfig
	log  *slog.Logger
	m    *workerMetrics
	sess *session
	pool *bookiePool

	done chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc

	// Used by the run goroutine only: ledgers this worker failed on and
	// when it may try them again, and where the next page of marks starts.
	backoff map[int64]time.Time
	cursor  string
}

// NewWorker validates cfg and returns a Worker; Start runs it.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "autorecovery-worker", "worker", cfg.ID)
	m, err := newWorkerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg: cfg, log: log, m: m,
		sess:    newSession(cfg.Store, cfg.SessionTTL, log),
		pool:    newBookiePool(cfg),
		done:    make(chan struct{}),
		backoff: map[int64]time.Time{},
	}, nil
}

// Start runs the worker in the background until Close. It returns at once.
func (w *Worker) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx)
}

// Close stops the worker: a copy in progress is abandoned (its mark stays,
// its lock goes with the session) and connections are closed.
func (w *Worker) Close() error {
	w.mu.Lock()
	started, cancel := w.started, w.cancel
	w.cancel = nil
	w.mu.Unlock()
	if started && cancel != nil {
		cancel()
		<-w.done
	}
	w.sess.close(w.cfg.OpTimeout)
	w.pool.close()
	return nil
}

func (w *Worker) run(ctx context.Context) {
	defer close(w.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.sess.run(ctx)
	}()
	defer wg.Wait()
	t := time.NewTicker(w.cfg.PollInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		more, err := w.round(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("autorecovery round failed; will retry", "err", err)
		}
		if more && err == nil {
			continue // there may be more work: look again at once
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type lockValue struct {
	Worker string `json:"worker"`
	UnixMs int64  `json:"unix_ms"`
}

// round reads a page of marks and repairs the ones it can claim; it
// reports whether another round should follow at once (it resolved some,
// or more pages remain).
func (w *Worker) round(ctx context.Context) (bool, error) {
	n, err := w.roundOnce(ctx)
	return n > 0 || w.cursor != "", err
}

func (w *Worker) roundOnce(ctx context.Context) (int, error) {
	opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	isPaused, _, err := paused(opCtx, w.cfg.Store)
	if err != nil || isPaused {
		cancel()
		w.cursor = ""
		return 0, err
	}
	res, err := w.cfg.Store.List(opCtx, UnderReplicatedPrefix, metadata.Page{After: w.cursor, Limit: w.cfg.MaxMarksPerPoll}, metadata.ReadOptions{})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("autorecovery: list marks: %w", err)
	}
	// Walk the marks page by page across rounds, so marks beyond the first
	// page are reached even while the first page is locked or backing off.
	w.cursor = ""
	if res.More && len(res.KVs) > 0 {
		w.cursor = res.KVs[len(res.KVs)-1].Key
	}
	now := time.Now()
	for id, until := range w.backoff {
		if now.After(until) {
			delete(w.backoff, id)
		}
	}
	// Random order spreads concurrent workers over different ledgers.
	kvs := res.KVs
	rand.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
	resolved := 0
	for _, kv := range kvs {
		if ctx.Err() != nil {
			return resolved, nil
		}
		id, ok := parseIDKey(UnderReplicatedPrefix, kv.Key)
		if !ok {
			continue
		}
		if _, wait := w.backoff[id]; wait {
			continue
		}
		done, err := w.claimAndRepair(ctx, id)
		if errors.Is(err, ErrPaused) {
			w.cursor = ""
			return resolved, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return resolved, nil
			}
			w.m.failures.Inc()
			w.backoff[id] = time.Now().Add(w.cfg.RetryBackoff)
			w.log.Warn("ledger repair failed; will retry", "ledger", id, "err", err, "retry_in", w.cfg.RetryBackoff)
			continue
		}
		if done {
			resolved++
		}
	}
	return resolved, nil
}

// claimAndRepair takes the ledger's lock (false if another worker holds
// it), repairs the ledger and releases the lock.
func (w *Worker) claimAndRepair(ctx context.Context, id int64) (bool, error) {
	opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	if p, _, err := paused(opCtx, w.cfg.Store); err != nil || p {
		cancel()
		if p {
			return false, ErrPaused
		}
		return false, err
	}
	val, _ := json.Marshal(lockValue{Worker: w.cfg.ID, UnixMs: time.Now().UnixMilli()})
	ok, err := w.sess.acquire(opCtx, LockKey(id), val)
	cancel()
	if err != nil || !ok {
		return false, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), w.cfg.OpTimeout)
		defer cancel()
		if err := w.sess.release(rctx, LockKey(id)); err != nil {
			w.log.Warn("lock release failed; it goes with the session", "ledger", id, "err", err)
		}
	}()
	return true, w.repair(ctx, id)
}

// maxRepairSteps bounds the read-fix rounds of one ledger: each round swaps
// one (segment, position) or resolves the mark, and a ledger has at most
// a few hundred of those.
const maxRepairSteps = 10_000

// repair resolves the mark of ledger id. Each step re-reads the mark and the
// metadata, so concurrent workers, auditors and deletions are seen.
func (w *Worker) repair(ctx context.Context, id int64) error {
	start := time.Now()
	var total copyStats
	swaps := 0
	for step := 0; step < maxRepairSteps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		st, err := w.readState(opCtx, id)
		cancel()
		if err != nil {
			return err
		}
		if st.mark == nil {
			return nil // resolved by someone else
		}
		if st.md == nil || st.md.State != ledger.StateClosed {
			// Deleted, or not closed (marks are only for closed ledgers;
			// an open one belongs to its writer): nothing to repair.
			if st.md != nil {
				w.log.Warn("dropping mark of a ledger that is not closed", "ledger", id, "state", st.md.State)
			}
			if err := w.deleteMark(ctx, id, st.markVersion); !errors.Is(err, metadata.ErrVersionMismatch) {
				return err
			}
			continue
		}
		if b := nextCorrupt(st); b != "" {
			cs, err := w.rewriteCorrupt(ctx, st, b)
			if err != nil {
				return err
			}
			total.entries += cs.entries
			total.bytes += cs.bytes
			swaps++
			continue
		}
		s, p := w.nextToFix(st)
		if s < 0 {
			if len(st.mark.Incomplete) > 0 {
				// Holes on live bookies (see replicas.go): fill them in
				// place, then drop the mark like for a swap.
				cs, err := w.fillHoles(ctx, st)
				if err != nil {
					return err
				}
				total.entries += cs.entries
				total.bytes += cs.bytes
				swaps++
			}
			err := w.deleteMark(ctx, id, st.markVersion)
			if errors.Is(err, metadata.ErrVersionMismatch) {
				continue // the auditor extended the mark: look again
			}
			if err == nil && swaps > 0 {
				w.m.ledgers.Inc()
				w.log.Info("ledger re-replicated", "ledger", id, "segments", swaps, "entries", total.entries,
					"bytes", total.bytes, "took", time.Since(start))
			}
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		p2, _, err := paused(pctx, w.cfg.Store)
		cancel()
		if err != nil {
			return err
		}
		if p2 {
			return ErrPaused
		}
		cs, err := w.replace(ctx, st, s, p)
		if err != nil {
			return err
		}
		total.entries += cs.entries
		total.bytes += cs.bytes
		swaps++
	}
	return fmt.Errorf("autorecovery: ledger %d not resolved after %d steps", id, maxRepairSteps)
}

// ledgerState is one consistent-enough read of what repair needs.
type ledgerState struct {
	mark        *Mark
	markVersion int64
	md          *ledger.Metadata // nil: ledger deleted
	mdVersion   int64
	live        map[string]topology.BookieInfo
	decom       map[string]bool
	// limbo maps each decommissioned bookie in limbo to its current
	// instance (instance.go).
	limbo map[string]string
}

func (w *Worker) readState(ctx context.Context, id int64) (*ledgerState, error) {
	st := &ledgerState{}
	kv, err := w.cfg.Store.Get(ctx, UnderReplicatedKey(id), metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("autorecovery: read mark of %d: %w", id, err)
	}
	m, err := decodeMark(kv)
	if err != nil {
		w.log.Warn("undecodable mark; treating it as empty", "ledger", id, "err", err)
	}
	st.mark, st.markVersion = &m, kv.Version
	mkv, err := w.cfg.Store.Get(ctx, ledger.LedgerKey(id), metadata.ReadOptions{})
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return st, nil
	case err != nil:
		return nil, fmt.Errorf("autorecovery: read metadata of %d: %w", id, err)
	}
	var md ledger.Metadata
	if err := json.Unmarshal(mkv.Value, &md); err != nil {
		return nil, fmt.Errorf("autorecovery: decode metadata of %d: %w", id, err)
	}
	if err := checkMetadata(&md); err != nil {
		return nil, err
	}
	st.md, st.mdVersion = &md, mkv.Version
	if st.live, err = registry(ctx, w.cfg.Store); err != nil {
		return nil, err
	}
	if st.decom, err = decommissioned(ctx, w.cfg.Store); err != nil {
		return nil, err
	}
	if st.limbo, err = limboInstances(ctx, w.cfg.Store, st.decom); err != nil {
		return nil, err
	}
	return st, nil
}

// checkMetadata rejects metadata this package cannot safely rewrite.
func checkMetadata(md *ledger.Metadata) error {
	if md.Ensemble < 1 || md.WriteQuorum < 1 || md.WriteQuorum > md.Ensemble || len(md.Segments) == 0 {
		return fmt.Errorf("autorecovery: ledger %d: bad metadata (E=%d Qw=%d, %d segments)", md.ID, md.Ensemble, md.WriteQuorum, len(md.Segments))
	}
	for _, s := range md.Segments {
		if len(s.Ensemble) != md.Ensemble {
			return fmt.Errorf("autorecovery: ledger %d: segment at %d has %d bookies, want %d", md.ID, s.FirstEntry, len(s.Ensemble), md.Ensemble)
		}
	}
	return nil
}

// lost reports whether bookie id must be replaced: the mark names it and it
// is decommissioned or not registered. A marked bookie that came back
// (registered, not decommissioned) still holds its data and is left alone.
func (st *ledgerState) lost(id string) bool {
	if st.decom[id] {
		return true
	}
	_, ok := st.live[id]
	return !ok
}

// nextToFix returns the first (segment, position) holding a lost marked
// bookie, or (-1, -1).
func (w *Worker) nextToFix(st *ledgerState) (int, int) {
	marked := map[string]bool{}
	for _, b := range st.mark.Missing {
		if st.lost(b) {
			marked[b] = true
		}
	}
	for s, seg := range st.md.Segments {
		for p, b := range seg.Ensemble {
			if marked[b.ID] && !rebuilt(b, st.limbo) {
				return s, p
			}
		}
	}
	return -1, -1
}

// replace moves position p of segment s to a new bookie: choose it, copy the
// entries, then swap it into the metadata by compare-and-set.
func (w *Worker) replace(ctx context.Context, st *ledgerState, s, p int) (copyStats, error) {
	md := st.md
	seg := md.Segments[s]
	lostID := seg.Ensemble[p].ID
	candidates := make([]topology.BookieInfo, 0, len(st.live))
	for _, b := range st.live {
		if !st.decom[b.ID] {
			candidates = append(candidates, b)
		}
	}
	exclude := map[string]bool{}
	for id := range st.decom {
		exclude[id] = true
	}
	for _, b := range seg.Ensemble {
		exclude[b.ID] = true
	}
	target, err := w.cfg.Placement.ReplaceBookie(seg.Ensemble, md.WriteQuorum, p, candidates, exclude)
	if err != nil {
		// No spare: a re-formatted bookie in limbo that is registered
		// under its new instance takes its own replica back (instance.go).
		self, ok := st.live[lostID]
		inst, limbo := st.limbo[lostID]
		if !errors.Is(err, topology.ErrNotEnoughBookies) || !limbo || !ok || self.InstanceID != inst || self.ReadOnly {
			return copyStats{}, fmt.Errorf("autorecovery: ledger %d segment %d: choose a replacement for %s: %w", md.ID, s, lostID, err)
		}
		w.log.Info("no spare bookie: rebuilding the replica on the re-formatted bookie's new instance",
			"ledger", md.ID, "segment", s, "bookie", lostID, "old_instance", seg.Ensemble[p].InstanceID, "new_instance", inst)
		target = self
	}
	target.ReadOnly, target.ReadOnlyReason = false, ""
	log := w.log.With("ledger", md.ID, "segment", s, "position", p, "lost", lostID, "target", target.ID)
	log.Info("re-replicating segment", "first_entry", seg.FirstEntry, "last_entry", segmentEnd(md, s))
	cs, err := w.copySegment(ctx, md, s, p, target, st.live)
	w.m.entries.Add(float64(cs.entries))
	w.m.bytes.Add(float64(cs.bytes))
	if err != nil {
		return cs, err
	}
	if err := w.swap(ctx, st, s, p, lostID, target); err != nil {
		return cs, err
	}
	w.m.segments.Inc()
	log.Info("segment re-replicated", "entries", cs.entries, "bytes", cs.bytes)
	return cs, nil
}

// swap writes the metadata with target at (s, p), guarded by the version
// the copy was planned on. If the metadata changed meanwhile (another
// worker, a deletion) it re-reads: when the same bookie is still at the
// same place of an identical closed segment the copy is still right and the
// swap is retried; otherwise the swap is dropped (the next step re-plans).
func (w *Worker) swap(ctx context.Context, st *ledgerState, s, p int, lostID string, target topology.BookieInfo) error {
	md, version := st.md, st.mdVersion
	key := ledger.LedgerKey(md.ID)
	for attempt := 0; attempt < 10; attempt++ {
		nmd := cloneMetadata(md)
		nmd.Segments[s].Ensemble[p] = target
		val, err := json.Marshal(nmd)
		if err != nil {
			return fmt.Errorf("autorecovery: encode metadata of %d: %w", md.ID, err)
		}
		opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		_, err = w.cfg.Store.Put(opCtx, key, val, version, 0)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) && !errors.Is(err, metadata.ErrUnknownOutcome) {
			return fmt.Errorf("autorecovery: write metadata of %d: %w", md.ID, err)
		}
		opCtx, cancel = context.WithTimeout(ctx, w.cfg.OpTimeout)
		kv, gerr := w.cfg.Store.Get(opCtx, key, metadata.ReadOptions{})
		cancel()
		if errors.Is(gerr, metadata.ErrNotFound) {
			return nil // deleted: the next step drops the mark
		}
		if gerr != nil {
			return fmt.Errorf("autorecovery: re-read metadata of %d: %w", md.ID, gerr)
		}
		var cur ledger.Metadata
		if err := json.Unmarshal(kv.Value, &cur); err != nil {
			return fmt.Errorf("autorecovery: decode metadata of %d: %w", md.ID, err)
		}
		if err := checkMetadata(&cur); err != nil {
			return err
		}
		if cur.State != ledger.StateClosed || len(cur.Segments) != len(md.Segments) || cur.LastEntry != md.LastEntry ||
			cur.Segments[s].FirstEntry != md.Segments[s].FirstEntry || cur.Segments[s].Ensemble[p].ID != lostID {
			return nil // someone else changed this place: re-plan
		}
		md, version = &cur, kv.Version
	}
	return fmt.Errorf("autorecovery: write metadata of %d: too many concurrent changes", md.ID)
}

func (w *Worker) deleteMark(ctx context.Context, id int64, version int64) error {
	opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	err := w.cfg.Store.Delete(opCtx, UnderReplicatedKey(id), version)
	switch {
	case err == nil, errors.Is(err, metadata.ErrNotFound):
		return nil
	case errors.Is(err, metadata.ErrVersionMismatch), errors.Is(err, metadata.ErrUnknownOutcome):
		return metadata.ErrVersionMismatch // re-read and look again
	}
	return fmt.Errorf("autorecovery: delete mark of %d: %w", id, err)
}

func cloneMetadata(m *ledger.Metadata) *ledger.Metadata {
	c := *m
	c.Segments = make([]ledger.Segment, len(m.Segments))
	for i, s := range m.Segments {
		c.Segments[i] = ledger.Segment{FirstEntry: s.FirstEntry, Ensemble: append([]topology.BookieInfo(nil), s.Ensemble...)}
	}
	return &c
}
