package autorecovery

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// The lost-bookie audit only sees bookies that left the registry. A live
// bookie can miss entries too: with Qw > Qa an add that failed on one
// replica is still reported added once Qa others confirmed it, and if no
// ensemble change followed (the ledger closed first, or no spare bookie
// existed), nothing ever copies it there. The replica check finds those
// holes and marks the ledger with the bookie under Mark.Incomplete; a
// worker then fills them in place, from the other replicas, without
// touching the ledger's metadata.
//
// A hole is an entry the bookie answers "not found" (gRPC NotFound) for.
// Other answers (unreachable, corrupt, or a bookie that does not know
// whether it held the ledger) are not holes: lost bookies are the
// lost-bookie audit's business and damaged entries the scrub's.

// checkReplicas scans every closed ledger and marks those with holes on
// live bookies.
func (a *Auditor) checkReplicas(ctx context.Context, live map[string]topology.BookieInfo, decom map[string]bool) error {
	ledgers, holey := 0, 0
	err := listAll(ctx, a.cfg.Store, ledger.LedgerKeyPrefix, a.cfg.PageSize, func(kv metadata.KV) error {
		id, ok := ledger.ParseLedgerKey(kv.Key)
		if !ok {
			return nil
		}
		var md ledger.Metadata
		if err := json.Unmarshal(kv.Value, &md); err != nil || checkMetadata(&md) != nil || md.State != ledger.StateClosed {
			return nil // undecodable (the scan logs it) or not closed: open ledgers belong to their writer
		}
		ledgers++
		incomplete := map[string]bool{}
		for s, seg := range md.Segments {
			for p, b := range seg.Ensemble {
				info, ok := live[b.ID]
				if !ok || decom[b.ID] || incomplete[b.ID] {
					continue
				}
				e, err := a.firstHole(ctx, &md, s, p, info)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					a.log.Warn("replica check: cannot check a bookie; skipping it this round", "ledger", id, "bookie", b.ID, "err", err)
					continue
				}
				if e >= 0 {
					a.log.Warn("replica check: live bookie misses an entry of its write set", "ledger", id, "bookie", b.ID, "entry", e)
					incomplete[b.ID] = true
				}
			}
		}
		if len(incomplete) == 0 {
			return nil
		}
		holey++
		ids := sortedKeys(incomplete)
		_, err := a.updateMark(ctx, id, func(m *Mark) bool {
			union, changed := sortedUnion(m.Incomplete, ids)
			m.Incomplete = union
			return changed
		})
		return err
	})
	if err != nil {
		return err
	}
	a.log.Info("replica check done", "ledgers", ledgers, "with_holes", holey)
	return nil
}

// firstHole returns the first entry of segment s in position p's write
// sets that bookie b answers "not found" for, -1 if none, or an error if
// b could not be asked.
func (a *Auditor) firstHole(ctx context.Context, md *ledger.Metadata, s, p int, b topology.BookieInfo) (int64, error) {
	first, last := md.Segments[s].FirstEntry, segmentEnd(md, s)
	c, err := a.pool.client(b.Address)
	if err != nil {
		return -1, err
	}
	for e := first; e <= last; e++ {
		if !writeSetHas(e, md.Ensemble, md.WriteQuorum, p) {
			continue
		}
		missing, err := hasHole(ctx, c, b, a.cfg.RPCTimeout, md.ID, e)
		if err != nil {
			return -1, err
		}
		if missing {
			return e, nil
		}
	}
	return -1, nil
}

// hasHole asks bookie b (through c) for entry e: true if it answers "not
// found". The request names b's instance, so a re-formatted bookie (in
// limbo it answers "ledger unknown", an error here) or an impostor is never
// taken for b.
func hasHole(ctx context.Context, c bookiev1.BookieClient, b topology.BookieInfo, timeout time.Duration, id, e int64) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.ReadEntry(rctx, &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: e,
		ExpectedBookieId: b.ID, ExpectedInstanceId: b.InstanceID})
	switch {
	case err == nil:
		return false, nil
	case status.Code(err) == codes.NotFound:
		return true, nil
	case status.Code(err) == codes.DataLoss:
		return false, nil // damaged, not missing: the scrub's business
	}
	return false, err
}

// fillHoles copies, for every live bookie the mark lists as incomplete,
// each entry of its write sets it does not hold from another replica,
// with recovery adds. The metadata does not change.
func (w *Worker) fillHoles(ctx context.Context, st *ledgerState) (copyStats, error) {
	var total copyStats
	md := st.md
	for _, id := range st.mark.Incomplete {
		b, ok := st.live[id]
		if !ok || st.decom[id] {
			continue // gone meanwhile: the lost-bookie audit handles it
		}
		c, err := w.pool.client(b.Address)
		if err != nil {
			return total, err
		}
		for s, seg := range md.Segments {
			for p, eb := range seg.Ensemble {
				if eb.ID != id {
					continue
				}
				for e := seg.FirstEntry; e <= segmentEnd(md, s); e++ {
					if !writeSetHas(e, md.Ensemble, md.WriteQuorum, p) {
						continue
					}
					missing, err := hasHole(ctx, c, b, w.cfg.RPCTimeout, md.ID, e)
					if err != nil {
						return total, fmt.Errorf("autorecovery: ledger %d: check entry %d on %s: %w", md.ID, e, id, err)
					}
					if !missing {
						continue
					}
					n, err := w.copyEntry(ctx, md, s, p, e, b, st.live)
					if err != nil {
						return total, err
					}
					total.entries++
					total.bytes += int64(n)
				}
			}
		}
		if total.entries > 0 {
			w.log.Info("filled holes on a live bookie", "ledger", md.ID, "bookie", id, "entries", total.entries)
		}
	}
	w.m.entries.Add(float64(total.entries))
	w.m.bytes.Add(float64(total.bytes))
	return total, nil
}
