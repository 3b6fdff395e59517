package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// GetFailoverTarget implements the admin RPC from the policy cache.
func (a *adminService) GetFailoverTarget(ctx context.Context, r *clientv1.GetFailoverTargetRequest) (*clientv1.FailoverTarget, error) {
	if err := ValidateName("group", r.GetGroup()); err != nil {
		return nil, GRPCError(err)
	}
	kv, err := a.b.policies.get(ctx, failoverPrefix+r.GetGroup(), true)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: failover group %s has no target", ErrNotFound, r.GetGroup()))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read failover target of group %s: %v", ErrUnavailable, r.GetGroup(), err))
	}
	out, err := failoverTargetProto(r.GetGroup(), kv)
	return out, GRPCError(err)
}
