package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
)

// Client failover groups (controlled policy): the key failoverPrefix +
// group in the global shard holds the region the group's clients must use
// (failoverRecord, JSON). Clients poll GetFailoverTarget; the broker
// answers from its policy cache (which follows the prefix), so a region cut
// off from the global quorum still tells its clients where to go.

// failoverPrefix + group holds a failover group's target region.
const failoverPrefix = "failover/"

// failoverRecord is the stored value of a failover group.
type failoverRecord struct {
	Region    string `json:"region"`
	UpdatedMs int64  `json:"updated_ms"`
}

func failoverTargetProto(group string, kv metadata.KV) (*clientv1.FailoverTarget, error) {
	var rec failoverRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return nil, fmt.Errorf("broker: failover group %s record corrupt: %v", group, err)
	}
	return &clientv1.FailoverTarget{Group: group, Region: rec.Region, Version: kv.Version, UpdatedMs: rec.UpdatedMs}, nil
}

// SetFailoverTarget implements the admin RPC: the region must be
// registered in the global region registry.
func (a *adminService) SetFailoverTarget(ctx context.Context, r *clientv1.SetFailoverTargetRequest) (*clientv1.FailoverTarget, error) {
	if err := ValidateName("group", r.GetGroup()); err != nil {
		return nil, GRPCError(err)
	}
	if err := ValidateName("region", r.GetRegion()); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.policies.get(ctx, regionPrefix+r.GetRegion(), false); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: region %q is unknown (not in the global region registry; known: [%s])",
				ErrInvalidArgument, r.GetRegion(), strings.Join(a.b.knownRegions(), ",")))
		}
		return nil, GRPCError(fmt.Errorf("%w: check region %q: %v", ErrUnavailable, r.GetRegion(), err))
	}
	val, _ := json.Marshal(failoverRecord{Region: r.GetRegion(), UpdatedMs: time.Now().UnixMilli()})
	kv, err := a.b.cfg.Global.Put(ctx, failoverPrefix+r.GetGroup(), val, metadata.AnyVersion, 0)
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: write failover target of group %s: %v", ErrUnavailable, r.GetGroup(), err))
	}
	a.b.policies.learn(kv)
	a.b.log.Info("failover target set", "group", r.GetGroup(), "region", r.GetRegion(), "version", kv.Version)
	out, err := failoverTargetProto(r.GetGroup(), kv)
	return out, GRPCError(err)
}

// Bounds of the freshness check of GetFailoverTarget.
const (
	// failoverConfirmEvery: a target read from the global shard (or a
	// failed attempt) less than this long ago is answered from the policy
	// cache without reading again, so the polls of many clients cost one
	// global read per group and interval.
	failoverConfirmEvery = time.Second
	// failoverConfirmTimeout bounds the global read: a client's probe
	// timeout is about a second, and a cut region must still answer (its
	// copy, marked stale) within it.
	failoverConfirmTimeout = 500 * time.Millisecond
	// failoverConfirmCost is what one remembered group costs besides its
	// name (map entry, times), counted against
	// Config.MaxFailoverConfirmBytes.
	failoverConfirmCost = 96
)

// failoverConfirms remembers, per failover group, when this broker last
// read the target from the global shard and whether that read failed.
// Safe for concurrent use.
type failoverConfirms struct {
	// limit bounds bytes (Config.MaxFailoverConfirmBytes); set before use.
	limit int64
	mu    sync.Mutex
	// at maps a group to its last attempt; bytes is its cost.
	at    map[string]failoverConfirm
	bytes int64
}

// failoverConfirm is one group's last read of the global shard.
type failoverConfirm struct {
	// tried is when the last read was attempted; ok is when the last
	// successful one was (zero: never).
	tried, ok time.Time
	failed    bool
}

func (f *failoverConfirms) get(group string) failoverConfirm {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[group]
}

func (f *failoverConfirms) record(group string, now time.Time, failed bool) failoverConfirm {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, known := f.at[group]
	if !known {
		cost := int64(len(group)) + failoverConfirmCost
		limit := f.limit
		if limit <= 0 {
			limit = DefaultConfig().MaxFailoverConfirmBytes
		}
		if f.at == nil || f.bytes+cost > limit {
			// Past the bound: forget every group (the next polls read the
			// global shard again).
			f.at, f.bytes = map[string]failoverConfirm{}, 0
		}
		f.bytes += cost
	}
	c.tried, c.failed = now, failed
	if !failed {
		c.ok = now
	}
	f.at[group] = c
	return c
}

// GetFailoverTarget implements the admin RPC from the policy cache. The
// answer says whether it may be stale: the broker confirms its copy with a
// linearizable read of the global shard (at most one per group and
// failoverConfirmEvery); when that read fails, as in a region cut off from
// the global quorum, it answers its copy with stale = true and
// confirmed_ms = when it last read it. Clients follow only a higher
// version than the one they applied, so a stale copy never sends them
// back.
func (a *adminService) GetFailoverTarget(ctx context.Context, r *clientv1.GetFailoverTargetRequest) (*clientv1.FailoverTarget, error) {
	if err := ValidateName("group", r.GetGroup()); err != nil {
		return nil, GRPCError(err)
	}
	key := failoverPrefix + r.GetGroup()
	kv, err := a.b.policies.get(ctx, key, true)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: failover group %s has no target", ErrNotFound, r.GetGroup()))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read failover target of group %s: %v", ErrUnavailable, r.GetGroup(), err))
	}
	now := time.Now()
	conf := a.b.failoverConfirms.get(r.GetGroup())
	if now.Sub(conf.tried) >= failoverConfirmEvery {
		fctx, cancel := context.WithTimeout(ctx, failoverConfirmTimeout)
		fresh, ferr := a.b.cfg.Global.Get(fctx, key, metadata.ReadOptions{})
		cancel()
		switch {
		case ferr == nil:
			a.b.policies.learn(fresh)
			if fresh.Version >= kv.Version {
				kv = fresh
			}
			conf = a.b.failoverConfirms.record(r.GetGroup(), now, false)
		case errors.Is(ferr, metadata.ErrNotFound):
			return nil, GRPCError(fmt.Errorf("%w: failover group %s has no target", ErrNotFound, r.GetGroup()))
		default:
			if ctx.Err() != nil {
				return nil, GRPCError(ctx.Err())
			}
			conf = a.b.failoverConfirms.record(r.GetGroup(), now, true)
			a.b.log.Debug("failover target: global shard unreadable; answering the cached copy as stale", "group", r.GetGroup(), "err", ferr)
		}
	}
	out, err := failoverTargetProto(r.GetGroup(), kv)
	if err != nil {
		return nil, GRPCError(err)
	}
	if conf.failed {
		out.Stale = true
		a.b.policies.stale.Inc()
	}
	if !conf.ok.IsZero() {
		out.ConfirmedMs = conf.ok.UnixMilli()
	}
	return out, nil
}
