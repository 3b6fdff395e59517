//go:build unix

package region

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Rebuilding a whole region of a dev cluster under the same name, as an
// operator does after losing it: every byte the region held is gone — its
// brokers' state, its bookies' journals and ledgers, its regional metadata
// shard (ownership, ledger lists, cursors, dedup snapshots, bookie cookies)
// — and the region comes back empty with the same name, processes and
// addresses. The global metadata stays: it lives in the Raft group shared
// by every region, of which the region's metadata node keeps its replica
// (another region's copy would bring it back anyway).
//
// Dragonboat keeps every shard of a node in one log DB, and a replica whose
// data was removed (NodeHost.RemoveData) can never start again under the
// same (shard, replica) IDs. So the region's metadata is replaced by a new,
// empty Raft shard with the same name and a new shard ID, recorded in
// dev.json (DevRegionPlan.ShardID): every client names shards, never IDs,
// so brokers and bookies see an empty regional store. The old shard's
// Raft log stays in the node's log DB, unreferenced. A new ID is the
// highest shard ID of the plan plus one: the highest never decreases (a
// rebuild replaces an ID by a higher one), so no ID is given twice
// (nextShardID).

// DevRegionRequest acts on a whole region. Op "rebuild": kill the region's
// brokers and bookies (SIGKILL) and stop its metadata node, delete the
// bookies' data, give the region a new empty regional metadata shard under
// the same name (the global shard's replica stays), and start everything
// again, waiting until the region serves public/default.
type DevRegionRequest struct {
	Op     string `json:"op"`
	Region string `json:"region"`
}

// RebuildRegion rebuilds region name empty (see DevRegionRequest) and
// returns a one-line account ("region a rebuilt: ..."). When it fails
// half-way, running it again completes the rebuild.
func (d *Dev) RebuildRegion(ctx context.Context, name string) (string, error) {
	if err := d.checkRegion("region", name); err != nil {
		return "", err
	}
	d.rebuildMu.Lock()
	defer d.rebuildMu.Unlock()
	ri := slices.IndexFunc(d.plan.Regions, func(r DevRegionPlan) bool { return r.Name == name })
	next := nextShardID(d.plan)
	// Stop: brokers and bookies killed (the region is lost: nothing they
	// would flush on a graceful stop survives), brokers first so that none
	// writes to a bookie or the regional shard meanwhile; the metadata
	// node stopped gracefully, as its global replica stays.
	for _, role := range []string{RoleBroker, RoleBookie, RoleMeta} {
		var wg sync.WaitGroup
		for _, p := range d.procs {
			if p.region != name || p.role != role {
				continue
			}
			if role == RoleMeta {
				wg.Go(func() { p.p.Stop(ctx) })
			} else {
				wg.Go(p.p.Kill)
			}
		}
		wg.Wait()
	}
	rdir := filepath.Join(d.cfg.DataDir, name)
	bookies := 0
	for _, p := range d.procs {
		if p.region != name || p.role != RoleBookie {
			continue
		}
		// No format needed: empty directories and no cookie in the new
		// regional shard make a brand-new bookie (bookie/cookie.go).
		if err := os.RemoveAll(filepath.Join(rdir, fmt.Sprintf("%s-%d", p.role, p.index))); err != nil {
			return "", fmt.Errorf("dev: rebuild %s: wipe %s: %w", name, p.p.Spec().Name, err)
		}
		bookies++
	}
	// Brokers keep no local data (their state is in the regional shard).
	old := d.plan.Regions[ri].ShardID
	d.plan.Regions[ri].ShardID = next
	if err := writePlan(filepath.Join(d.cfg.DataDir, DevPlanFile), d.plan); err != nil {
		d.plan.Regions[ri].ShardID = old
		return "", err
	}
	r := d.plan.Regions[ri]
	for i := range r.Meta {
		if err := d.writeProcConfig(RoleMeta, name, i, d.metaConfig(r, i)); err != nil {
			return "", err
		}
	}
	d.log.Warn("region wiped: regional metadata shard replaced by an empty one", "region", name, "old_shard_id", old, "new_shard_id", next, "bookies_wiped", bookies)
	if err := d.startRoles(ctx, name); err != nil {
		return "", fmt.Errorf("dev: rebuild %s: %w (run it again to finish)", name, err)
	}
	if err := d.waitNamespace(ctx, r.Brokers[0].HTTP, "public/default"); err != nil {
		return "", fmt.Errorf("dev: rebuild %s: %w", name, err)
	}
	return fmt.Sprintf("region %s rebuilt empty: regional metadata shard %d replaced by %d (global shard kept), %d bookie(s) wiped, %d broker(s) restarted",
		name, old, next, bookies, len(r.Brokers)), nil
}

// nextShardID is the Raft shard ID for a rebuilt region's new regional
// shard: one above the plan's highest (the global shard is 1). Since a
// rebuild replaces an ID by a higher one, the highest never decreases and
// no ID, not even a retired one, is given twice.
func nextShardID(p *DevPlan) uint64 {
	var top uint64 = 1
	for _, r := range p.Regions {
		top = max(top, r.ShardID)
	}
	return top + 1
}

func (d *Dev) handleRegion(w http.ResponseWriter, r *http.Request) {
	var req DevRegionRequest
	if !decodeDevJSON(w, r, &req) {
		return
	}
	if req.Op != "rebuild" {
		writeDevError(w, fmt.Errorf("op: %q is not rebuild", req.Op))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ReadyTimeout)
	defer cancel()
	ans, err := d.RebuildRegion(ctx, req.Region)
	if err != nil {
		writeDevError(w, err)
		return
	}
	d.log.Warn("region rebuilt", "region", req.Region, "answer", ans)
	writeDevJSON(w, http.StatusOK, DevFaultResponse{DevStatus: d.Status(), Answer: ans})
}

// Region sends a region request (see Dev.RebuildRegion).
func (c *DevControlClient) Region(ctx context.Context, req DevRegionRequest) (DevFaultResponse, error) {
	var r DevFaultResponse
	return r, c.do(ctx, http.MethodPost, "/v1/region", req, &r)
}
