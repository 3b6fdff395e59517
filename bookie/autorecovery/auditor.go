package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Auditor finds closed ledgers that lost a bookie and marks them
// under-replicated. Run one candidate per process that may audit (brokers,
// bookies or a standalone autorecovery process); candidates elect one leader
// per region through AuditorKey, and only the leader audits. Safe for
// concurrent use.
type Auditor struct {
	cfg  AuditorConfig
	log  *slog.Logger
	m    *auditorMetrics
	sess *session

	cancel context.CancelFunc
	done   chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	leader  bool
	started bool

	// State of the run goroutine only (no lock).
	everLive         map[string]bool      // bookies seen registered since leadership began
	lostSince        map[string]time.Time // bookies seen missing, and since when
	lastScanned      map[string]bool      // lost bookies the last full scan looked for
	lastScan         time.Time            // zero: scan at the next tick
	lastReplicaCheck time.Time            // start of the last replica check (or of leadership)
	pool             *bookiePool          // bookie connections of the replica check
}

// NewAuditor validates cfg and returns an Auditor; Start runs it.
func NewAuditor(cfg AuditorConfig) (*Auditor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "auditor", "auditor", cfg.ID)
	m, err := newAuditorMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	pool := newBookiePool(WorkerConfig{MaxEntryBytes: 64 << 20, DialOptions: cfg.DialOptions})
	return &Auditor{cfg: cfg, log: log, m: m, sess: newSession(cfg.Store, cfg.SessionTTL, log), done: make(chan struct{}), pool: pool}, nil
}

// Start runs the election and, while leader, the audit loop in the
// background until Close. It returns at once.
func (a *Auditor) Start() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return
	}
	a.started = true
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go a.run(ctx)
}

// Close stops the auditor and gives up leadership (its session is closed,
// so another candidate takes over without waiting for the TTL).
func (a *Auditor) Close() error {
	a.mu.Lock()
	started := a.started
	cancel := a.cancel
	a.cancel = nil
	a.mu.Unlock()
	if !started {
		return nil
	}
	if cancel != nil {
		cancel()
		<-a.done
	}
	a.sess.close(a.cfg.OpTimeout)
	a.setLeader(false)
	a.pool.close()
	return nil
}

// IsLeader reports whether this auditor currently holds AuditorKey.
func (a *Auditor) IsLeader() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leader
}

func (a *Auditor) setLeader(v bool) {
	a.mu.Lock()
	was := a.leader
	a.leader = v
	a.mu.Unlock()
	if v {
		a.m.leader.Set(1)
	} else {
		a.m.leader.Set(0)
		a.m.underReplicated.Set(0)
	}
	if v != was {
		a.log.Info("auditor leadership changed", "leader", v)
	}
}

func (a *Auditor) run(ctx context.Context) {
	defer close(a.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.sess.run(ctx)
	}()
	defer wg.Wait()
	t := time.NewTicker(a.cfg.CheckInterval)
	defer t.Stop()
	for {
		if err := a.tick(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("audit round failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type auditorValue struct {
	ID          string `json:"id"`
	SinceUnixMs int64  `json:"since_unix_ms"`
}

// elect keeps or takes leadership; it reports whether this auditor leads.
func (a *Auditor) elect(ctx context.Context) (bool, error) {
	if a.IsLeader() {
		ok, err := a.sess.holds(ctx, AuditorKey)
		if err != nil {
			return true, err // unknown: keep acting, the next round re-checks
		}
		if ok {
			return true, nil
		}
		a.setLeader(false)
	}
	val, _ := json.Marshal(auditorValue{ID: a.cfg.ID, SinceUnixMs: time.Now().UnixMilli()})
	ok, err := a.sess.acquire(ctx, AuditorKey, val)
	if err != nil || !ok {
		return false, err
	}
	// A new term starts from nothing: missing bookies are timed from now,
	// which can only delay marking, never hasten it.
	a.everLive = map[string]bool{}
	a.lostSince = map[string]time.Time{}
	a.lastScanned = map[string]bool{}
	a.lastScan = time.Time{}
	// The first replica check comes one interval into the term, not at
	// once: every election would otherwise read every entry.
	a.lastReplicaCheck = time.Now()
	a.setLeader(true)
	return true, nil
}

// tick is one check round: election, registry, pause flag, and a full scan
// when a bookie newly became lost or AuditInterval passed.
func (a *Auditor) tick(runCtx context.Context) error {
	ctx, cancel := context.WithTimeout(runCtx, a.cfg.OpTimeout)
	defer cancel()
	leader, err := a.elect(ctx)
	if err != nil || !leader {
		return err
	}
	live, err := registry(ctx, a.cfg.Store)
	if err != nil {
		return err
	}
	decom, err := decommissioned(ctx, a.cfg.Store)
	if err != nil {
		return err
	}
	now := time.Now()
	for id := range live {
		a.everLive[id] = true
		delete(a.lostSince, id)
	}
	for id := range a.everLive {
		if _, ok := live[id]; !ok {
			if _, seen := a.lostSince[id]; !seen {
				a.log.Warn("bookie left the registry", "bookie", id, "delay", a.cfg.LostBookieDelay)
				a.lostSince[id] = now
			}
		}
	}
	if n, err := countMarks(ctx, a.cfg.Store); err == nil {
		a.m.underReplicated.Set(float64(n))
	}
	isPaused, _, err := paused(ctx, a.cfg.Store)
	if err != nil || isPaused {
		return err
	}
	if iv := a.cfg.ReplicaCheckInterval; iv > 0 && now.Sub(a.lastReplicaCheck) >= iv {
		a.lastReplicaCheck = now
		// Like a scan, bounded by Close rather than OpTimeout.
		if err := a.checkReplicas(runCtx, live, decom); err != nil {
			return err
		}
	}
	due := a.lostBookies(now, decom)
	newlyLost := false
	for id := range due {
		if !a.lastScanned[id] {
			newlyLost = true
		}
	}
	if !newlyLost && !a.lastScan.IsZero() && now.Sub(a.lastScan) < a.cfg.AuditInterval {
		return nil
	}
	// A scan reads every ledger: it is bounded by Close, not by OpTimeout.
	return a.scan(runCtx, live, decom, now)
}

// lostBookies returns the bookies whose replicas must be moved: missing for
// at least LostBookieDelay, or decommissioned.
func (a *Auditor) lostBookies(now time.Time, decom map[string]bool) map[string]bool {
	due := map[string]bool{}
	for id, since := range a.lostSince {
		if now.Sub(since) >= a.cfg.LostBookieDelay {
			due[id] = true
		}
	}
	for id := range decom {
		due[id] = true
	}
	return due
}

// scan reads every ledger's metadata and marks closed ledgers that use a
// lost bookie. Bookies found in ensembles but not registered start their
// LostBookieDelay now (they may have died before this auditor's term).
func (a *Auditor) scan(ctx context.Context, live map[string]topology.BookieInfo, decom map[string]bool, now time.Time) error {
	a.m.scans.Inc()
	due := a.lostBookies(now, decom)
	limbo, err := limboInstances(ctx, a.cfg.Store, decom)
	if err != nil {
		return err
	}
	ledgers, marked := 0, 0
	err = listAll(ctx, a.cfg.Store, ledger.LedgerKeyPrefix, a.cfg.PageSize, func(kv metadata.KV) error {
		id, ok := ledger.ParseLedgerKey(kv.Key)
		if !ok {
			return nil
		}
		var md ledger.Metadata
		if err := json.Unmarshal(kv.Value, &md); err != nil {
			a.log.Warn("skipping undecodable ledger metadata", "key", kv.Key, "err", err)
			return nil
		}
		ledgers++
		var missing []string
		seen, added := map[string]bool{}, map[string]bool{}
		for _, seg := range md.Segments {
			for _, b := range seg.Ensemble {
				// A place already rebuilt on a limbo bookie's new instance
				// is not missing (instance.go); another place of the same
				// bookie may still be.
				if due[b.ID] && !added[b.ID] && !rebuilt(b, limbo) {
					added[b.ID] = true
					missing = append(missing, b.ID)
				}
				if seen[b.ID] {
					continue
				}
				seen[b.ID] = true
				if _, ok := live[b.ID]; !ok {
					if _, known := a.lostSince[b.ID]; !known {
						a.log.Warn("ledger ensemble names an unregistered bookie", "bookie", b.ID, "ledger", id)
						a.lostSince[b.ID] = now
					}
				}
			}
		}
		if len(missing) == 0 || md.State != ledger.StateClosed {
			return nil // open ledgers belong to their writer and to recovery
		}
		changed, err := a.mark(ctx, id, missing)
		if err != nil {
			return err
		}
		if changed {
			marked++
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.lastScanned = due
	a.lastScan = now
	a.log.Info("audit scan done", "ledgers", ledgers, "newly_marked", marked, "lost_bookies", sortedKeys(due))
	if n, err := countMarks(ctx, a.cfg.Store); err == nil {
		a.m.underReplicated.Set(float64(n))
	}
	return nil
}

// mark creates or extends the ledger's mark with missing; it reports
// whether it changed anything.
func (a *Auditor) mark(ctx context.Context, id int64, missing []string) (bool, error) {
	return a.updateMark(ctx, id, func(m *Mark) bool {
		union, changed := sortedUnion(m.Missing, missing)
		m.Missing = union
		return changed
	})
}

// updateMark creates the ledger's mark or changes it with apply, which
// reports whether it changed anything, by compare-and-set; it reports
// whether the stored mark changed.
func (a *Auditor) updateMark(ctx context.Context, id int64, apply func(*Mark) bool) (bool, error) {
	key := UnderReplicatedKey(id)
	for attempt := 0; attempt < 10; attempt++ {
		kv, err := a.cfg.Store.Get(ctx, key, metadata.ReadOptions{})
		var m Mark
		expect := metadata.MustNotExist
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			m = Mark{LedgerID: id, MarkedUnixMs: time.Now().UnixMilli()}
		case err != nil:
			return false, fmt.Errorf("autorecovery: read %s: %w", key, err)
		default:
			if m, err = decodeMark(kv); err != nil {
				a.log.Warn("replacing undecodable mark", "key", key, "err", err)
				m = Mark{LedgerID: id, MarkedUnixMs: time.Now().UnixMilli()}
			}
			expect = kv.Version
		}
		changed := apply(&m)
		if !changed && expect != metadata.MustNotExist {
			return false, nil
		}
		m.Auditor = a.cfg.ID
		if m.Missing == nil {
			m.Missing = []string{}
		}
		val, _ := json.Marshal(m)
		_, err = a.cfg.Store.Put(ctx, key, val, expect, 0)
		switch {
		case err == nil:
			a.m.marked.Inc()
			a.log.Info("ledger marked under-replicated", "ledger", id, "missing", m.Missing, "incomplete", m.Incomplete)
			return true, nil
		case errors.Is(err, metadata.ErrVersionMismatch), errors.Is(err, metadata.ErrUnknownOutcome):
			continue // a worker or another write raced; re-read
		default:
			return false, fmt.Errorf("autorecovery: write %s: %w", key, err)
		}
	}
	return false, fmt.Errorf("autorecovery: write %s: too many concurrent changes", key)
}

// countMarks counts the under-replicated marks.
func countMarks(ctx context.Context, store metadata.Store) (int, error) {
	n := 0
	err := listAll(ctx, store, UnderReplicatedPrefix, 0, func(metadata.KV) error { n++; return nil })
	return n, err
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
