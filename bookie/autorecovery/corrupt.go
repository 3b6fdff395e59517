package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
)

// MarkCorrupt marks ledger id under-replicated because bookieID, which is
// alive, holds a damaged replica of it (a bookie scrub or read found corrupt
// entries). A worker then rewrites that bookie's replica in place, entry by
// entry, from healthy replicas (recovery adds, which replace the damaged
// records), and drops the bookie from Mark.Corrupt. Ledgers that are deleted
// or not closed are left alone (nil): an open ledger belongs to its writer,
// and the bookie reports it again at its next scrub. reason is logged.
func MarkCorrupt(ctx context.Context, store metadata.Store, id int64, bookieID, reason string) error {
	if err := validateBookieID(bookieID); err != nil {
		return err
	}
	if id < 0 {
		return fmt.Errorf("%w: ledger ID must be >= 0, got %d", ErrInvalidArgument, id)
	}
	mkv, err := store.Get(ctx, ledger.LedgerKey(id), metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("autorecovery: read metadata of %d: %w", id, err)
	}
	var md ledger.Metadata
	if err := json.Unmarshal(mkv.Value, &md); err != nil {
		return fmt.Errorf("autorecovery: decode metadata of %d: %w", id, err)
	}
	if md.State != ledger.StateClosed {
		return nil
	}
	key := UnderReplicatedKey(id)
	for attempt := 0; attempt < 10; attempt++ {
		kv, err := store.Get(ctx, key, metadata.ReadOptions{})
		var m Mark
		expect := metadata.MustNotExist
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			m = Mark{LedgerID: id, MarkedUnixMs: time.Now().UnixMilli()}
		case err != nil:
			return fmt.Errorf("autorecovery: read %s: %w", key, err)
		default:
			if m, err = decodeMark(kv); err != nil {
				m = Mark{LedgerID: id, MarkedUnixMs: time.Now().UnixMilli()}
			}
			expect = kv.Version
		}
		union, changed := sortedUnion(m.Corrupt, []string{bookieID})
		if !changed && expect != metadata.MustNotExist {
			return nil
		}
		m.Corrupt = union
		if m.Missing == nil {
			m.Missing = []string{}
		}
		val, _ := json.Marshal(m)
		_, err = store.Put(ctx, key, val, expect, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, metadata.ErrVersionMismatch), errors.Is(err, metadata.ErrUnknownOutcome):
			continue
		default:
			return fmt.Errorf("autorecovery: write %s (%s): %w", key, reason, err)
		}
	}
	return fmt.Errorf("autorecovery: write %s: too many concurrent changes", key)
}

// nextCorrupt returns the first bookie of the mark's Corrupt list that is
// live and in one of the ledger's ensembles ("" if none): its replica is
// rewritten in place. Lost ones are the Missing path's business.
func nextCorrupt(st *ledgerState) string {
	for _, b := range st.mark.Corrupt {
		if st.lost(b) {
			continue
		}
		for _, seg := range st.md.Segments {
			for _, e := range seg.Ensemble {
				if e.ID == b {
					return b
				}
			}
		}
	}
	return ""
}

// rewriteCorrupt copies, to bookie b itself, every entry of every segment
// where b holds a replica, from the other replicas of each entry's write
// set (recovery adds replace b's damaged records), then drops b from the
// mark's Corrupt list, guarded by the mark's version.
func (w *Worker) rewriteCorrupt(ctx context.Context, st *ledgerState, b string) (copyStats, error) {
	md := st.md
	target := st.live[b]
	log := w.log.With("ledger", md.ID, "bookie", b)
	log.Info("rewriting a damaged replica from healthy ones")
	var total copyStats
	for s, seg := range md.Segments {
		for p, e := range seg.Ensemble {
			if e.ID != b {
				continue
			}
			cs, err := w.copySegment(ctx, md, s, p, target, st.live)
			w.m.entries.Add(float64(cs.entries))
			w.m.bytes.Add(float64(cs.bytes))
			total.entries += cs.entries
			total.bytes += cs.bytes
			if err != nil {
				return total, fmt.Errorf("autorecovery: ledger %d: rewrite damaged replica on %s: %w", md.ID, b, err)
			}
		}
	}
	m := *st.mark
	m.Corrupt = slices.DeleteFunc(slices.Clone(m.Corrupt), func(id string) bool { return id == b })
	val, _ := json.Marshal(m)
	opCtx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	_, err := w.cfg.Store.Put(opCtx, UnderReplicatedKey(md.ID), val, st.markVersion, 0)
	switch {
	case err == nil:
		w.m.segments.Inc()
		log.Info("damaged replica rewritten", "entries", total.entries, "bytes", total.bytes)
		return total, nil
	case errors.Is(err, metadata.ErrVersionMismatch), errors.Is(err, metadata.ErrUnknownOutcome), errors.Is(err, metadata.ErrNotFound):
		return total, nil // changed meanwhile: the next step re-reads it
	}
	return total, fmt.Errorf("autorecovery: update mark of %d: %w", md.ID, err)
}
