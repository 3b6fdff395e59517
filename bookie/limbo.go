package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/metadata"
)

// Limbo (BookKeeper BP-44). A bookie re-formatted with Format (meridian
// bookie format --force) lost whatever its previous instance stored. For
// every ledger that instance may have held it must not answer "not found":
// ledger recovery counts Qw-Qa+1 such answers as proof that an entry never
// reached Qa, and would truncate acknowledged entries. The rule:
//
//   - Format reads the ledger ID counter (ledger-id-counter) and records
//     LimboBelowLedger = the next unreserved ID in the new cookie. Every
//     ledger the old instance can have held has a smaller ID; a ledger with
//     a larger ID was created after the format and never lived on the old
//     instance.
//   - While in limbo, for a ledger below LimboBelowLedger, every "no such
//     ledger"/"no such entry" answer becomes UNAVAILABLE "ledger unknown"
//     (entries the bookie does hold are served), and normal adds are
//     refused with the same answer (the writer replaces the bookie).
//     Fences, recovery adds and deletes are served.
//   - Format also decommissions the bookie in autorecovery, so the auditor
//     marks its closed ledgers and workers copy their replicas elsewhere and
//     take it out of their ensembles.
//   - Limbo ends when no ledger below LimboBelowLedger names the bookie in
//     any ensemble any more, other than under its new instance (a place
//     autorecovery rebuilt on this instance when no spare bookie existed):
//     nothing the old instance held is referenced.
//     The bookie checks every Config.LimboCheckInterval, then clears the
//     limbo in the metadata cookie (CAS) and its directories, and withdraws
//     the decommission.
//
// Without Config.Metadata there is no ledger client and no counter: Format
// sets no limbo.

// decommissionedPrefix is autorecovery.DecommissionedPrefix (package
// autorecovery imports this package, so it cannot be imported here; a
// test in cmd/meridian checks they agree).
const decommissionedPrefix = "autorecovery/decommissioned/"

// DecommissionKeyPrefix is exported for that test only.
const DecommissionKeyPrefix = decommissionedPrefix

// Keys of package bookie/ledger (which imports this package): the ledger
// ID counter (JSON {"next": N}) and the ledger metadata prefix.
const (
	ledgerIDCounterKey = "ledger-id-counter"
	ledgerKeyPrefix    = "ledgers/"
)

// LedgerKeys returns the ledger metadata prefix and ID counter key package
// bookie relies on (a test in cmd/meridian checks they match package
// bookie/ledger).
func LedgerKeys() (prefix, counter string) { return ledgerKeyPrefix, ledgerIDCounterKey }

// FormatOptions configures Format.
type FormatOptions struct {
	// Force wipes directories that hold data or a cookie. Without it,
	// Format only formats empty directories.
	Force bool
}

// ErrNotEmpty is returned by Format without Force when a data directory
// holds data or a cookie.
var ErrNotEmpty = errors.New("bookie: data directory is not empty")

// Format (re)formats the bookie of cfg: it wipes the journal and ledger
// directories, creates a new instance ID and writes the new cookie to every
// directory and (compare-and-set) to the metadata cookie. When a previous
// instance may have held ledgers, the new instance starts in limbo (see
// above) and the bookie is decommissioned in autorecovery until its old
// ledgers are re-replicated. The bookie must not be running.
func Format(ctx context.Context, cfg Config, opts FormatOptions) (Cookie, error) {
	if err := cfg.Validate(); err != nil {
		return Cookie{}, err
	}
	fsys := cfg.Testing.FS
	if fsys == nil {
		fsys = faultfs.OS{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	journal, ledgers, err := dataDirs(cfg)
	if err != nil {
		return Cookie{}, err
	}
	dirs := cookieDirs(journal, ledgers)
	previous := false
	for _, d := range dirs {
		_, ok, err := readDirCookie(fsys, d)
		if ok || errors.Is(err, ErrCookie) {
			previous = true
		} else if err != nil {
			return Cookie{}, err
		}
	}
	data, err := hasData(fsys, journal, ledgers)
	if err != nil {
		return Cookie{}, err
	}
	c := Cookie{Version: cookieVersion, BookieID: cfg.ID, InstanceID: newInstanceID(), JournalDir: journal, LedgerDir: ledgers, CreatedUnixMs: time.Now().UnixMilli()}
	metaVer := metadata.MustNotExist
	if store := cfg.Metadata; store != nil {
		old, ver, ok, err := metaCookie(ctx, store, cfg.ID)
		if err != nil {
			return Cookie{}, err
		}
		if ok {
			metaVer = ver
			previous = true
			log.Warn("re-formatting bookie: the previous instance's data is abandoned", "old_instance", old.InstanceID)
		}
		if ok && !opts.Force {
			return Cookie{}, fmt.Errorf("%w: metadata key %s says %s exists; formatting abandons that instance's data: use --force", ErrNotEmpty, CookieKey(cfg.ID), old)
		}
		if previous || data {
			next, err := nextLedgerID(ctx, store)
			if err != nil {
				return Cookie{}, err
			}
			if next > 0 {
				c.LimboBelowLedger = next
				c.LimboDecommissioned = true
			}
		}
	}
	if (previous || data) && !opts.Force {
		return Cookie{}, fmt.Errorf("%w: %s holds data or a cookie; formatting wipes it: use --force", ErrNotEmpty, journal)
	}
	for _, d := range []string{ledgers, journal} {
		if err := wipeDir(fsys, d); err != nil {
			return Cookie{}, err
		}
	}
	for _, d := range dirs {
		if err := writeDirCookie(fsys, d, c); err != nil {
			return Cookie{}, err
		}
	}
	if store := cfg.Metadata; store != nil {
		if err := putMetaCookie(ctx, store, c, metaVer); err != nil {
			return Cookie{}, fmt.Errorf("%w (the directories are formatted; run format --force again)", err)
		}
		if c.LimboDecommissioned {
			if err := decommission(ctx, store, cfg.ID); err != nil {
				// The bookie retries it at start while in limbo.
				log.Warn("decommission after format failed; the bookie retries at start", "err", err)
			}
		}
	}
	log.Info("bookie formatted", "instance", c.InstanceID, "limbo_below_ledger", c.LimboBelowLedger)
	return c, nil
}

// nextLedgerID reads the ledger ID counter (0 when no ledger was ever
// created).
func nextLedgerID(ctx context.Context, store metadata.Store) (int64, error) {
	kv, err := store.Get(ctx, ledgerIDCounterKey, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("bookie: read %s: %w", ledgerIDCounterKey, err)
	}
	var v struct {
		Next int64 `json:"next"`
	}
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return 0, fmt.Errorf("bookie: decode %s: %w", ledgerIDCounterKey, err)
	}
	return v.Next, nil
}

// decommission writes the autorecovery decommission key of the bookie if
// it is absent.
func decommission(ctx context.Context, store metadata.Store, id string) error {
	val, _ := json.Marshal(map[string]any{"reason": "re-formatted (limbo)", "unix_ms": time.Now().UnixMilli()})
	_, err := store.Put(ctx, decommissionedPrefix+id, val, metadata.MustNotExist, 0)
	if err != nil && !errors.Is(err, metadata.ErrVersionMismatch) {
		return fmt.Errorf("bookie: decommission %s: %w", id, err)
	}
	return nil
}

// wipeDir removes everything in dir (files and the empty index directory).
func wipeDir(fsys faultfs.FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%w: list %s: %v", ErrIO, dir, err)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := fsys.Remove(p); err != nil {
			// A nested directory (the default ledger dir inside the
			// journal dir) was emptied before; anything else is an error.
			return fmt.Errorf("%w: remove %s: %v", ErrIO, p, err)
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("%w: sync %s: %v", ErrIO, dir, err)
	}
	return nil
}

// inLimbo reports whether the bookie must answer "ledger unknown" instead
// of "not found" for the ledger.
func (s *Server) inLimbo(ledger int64) bool {
	lb := s.limboBelow.Load()
	return lb > 0 && ledger < lb
}

// limboErr turns a not-found answer for a ledger in limbo into
// ErrLedgerUnknown.
func (s *Server) limboErr(ledger int64, err error) error {
	if err != nil && IsNotFound(err) && s.inLimbo(ledger) {
		s.idm.limboAnswers.Inc()
		return fmt.Errorf("%w: ledger %d: this bookie was re-formatted and its previous instance may have held it (%v)", ErrLedgerUnknown, ledger, err)
	}
	return err
}

// referencesOldLedgers reports whether any ledger below limit names the
// bookie in an ensemble, other than under its current instance (a place
// autorecovery rebuilt on this instance: see bookie/autorecovery's
// instance.go).
func referencesOldLedgers(ctx context.Context, store metadata.Store, id, instance string, limit int64) (bool, error) {
	page := metadata.Page{}
	for {
		res, err := store.List(ctx, ledgerKeyPrefix, page, metadata.ReadOptions{})
		if err != nil {
			return false, err
		}
		for _, kv := range res.KVs {
			lid, err := strconv.ParseInt(strings.TrimPrefix(kv.Key, ledgerKeyPrefix), 10, 64)
			if err != nil || lid >= limit {
				continue
			}
			var md struct {
				Segments []struct {
					Ensemble []struct {
						ID         string `json:"id"`
						InstanceID string `json:"instance_id"`
					} `json:"ensemble"`
				} `json:"segments"`
			}
			if err := json.Unmarshal(kv.Value, &md); err != nil {
				return true, fmt.Errorf("decode %s: %w", kv.Key, err)
			}
			for _, sg := range md.Segments {
				for _, b := range sg.Ensemble {
					if b.ID == id && (instance == "" || b.InstanceID != instance) {
						return true, nil
					}
				}
			}
		}
		if !res.More || len(res.KVs) == 0 {
			return false, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}

// watchLimbo ends the limbo once no ledger below the limit names the
// bookie (autorecovery moved them all); it runs while the bookie is in
// limbo and has metadata.
func (s *Server) watchLimbo(ctx context.Context) {
	defer s.bg.Done()
	store := s.cfg.Metadata
	if s.cookie.LimboDecommissioned {
		if err := decommission(ctx, store, s.cfg.ID); err != nil && ctx.Err() == nil {
			s.log.Warn("limbo: decommission failed; retrying", "err", err)
		}
	}
	t := time.NewTicker(s.cfg.LimboCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.cookie.LimboDecommissioned {
			if err := decommission(ctx, store, s.cfg.ID); err != nil {
				continue
			}
		}
		limit := s.limboBelow.Load()
		busy, err := referencesOldLedgers(ctx, store, s.cfg.ID, s.cookie.InstanceID, limit)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("limbo: ledger scan failed; retrying", "err", err)
			}
			continue
		}
		if busy {
			continue
		}
		if err := s.endLimbo(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("limbo: ending it failed; retrying", "err", err)
			}
			continue
		}
		return
	}
}

// endLimbo clears the limbo in the metadata cookie (CAS), then in the
// directories, then withdraws the decommission. A crash in between leaves
// a directory cookie in limbo: the next start re-checks and ends it again.
func (s *Server) endLimbo(ctx context.Context) error {
	store := s.cfg.Metadata
	meta, ver, ok, err := metaCookie(ctx, store, s.cfg.ID)
	if err != nil {
		return err
	}
	if !ok || !meta.sameIdentity(s.cookie) {
		return fmt.Errorf("%w: metadata cookie %s no longer names this instance %s", ErrCookie, CookieKey(s.cfg.ID), s.cookie.InstanceID)
	}
	c := s.cookie
	c.LimboBelowLedger, c.LimboDecommissioned = 0, false
	if err := putMetaCookie(ctx, store, c, ver); err != nil {
		return err
	}
	// Reads answer "not found" again from now on.
	s.limboBelow.Store(0)
	s.idm.limbo.Set(0)
	journal, ledgers, err := dataDirs(s.cfg)
	if err != nil {
		return err
	}
	for _, d := range cookieDirs(journal, ledgers) {
		if err := writeDirCookie(s.fs, d, c); err != nil {
			return err
		}
	}
	if s.cookie.LimboDecommissioned {
		if err := store.Delete(ctx, decommissionedPrefix+s.cfg.ID, metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
			return err
		}
	}
	s.cookie = c
	s.log.Info("limbo ended: autorecovery moved every ledger of the previous instance")
	return nil
}
