package client

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// FailoverTarget is a failover group's target region (package api/client/v1).
type FailoverTarget = clientv1.FailoverTarget

// SetFailoverTarget records region as the target of failover group group:
// clients of the group with the controlled policy switch to it. The region
// must be registered.
func (a *Admin) SetFailoverTarget(ctx context.Context, group, region string) (*FailoverTarget, error) {
	var out *FailoverTarget
	err := write(ctx, a, "set failover target of "+group, func(ctx context.Context) error {
		var err error
		out, err = a.api.SetFailoverTarget(ctx, &clientv1.SetFailoverTargetRequest{Group: group, Region: region})
		return err
	})
	return out, err
}

// GetFailoverTarget reads failover group group's target (ErrNotFound when
// none was set). The broker answers from its cached copy, so it works in
// a region cut off from the global metadata quorum.
func (a *Admin) GetFailoverTarget(ctx context.Context, group string) (*FailoverTarget, error) {
	return read(ctx, a, "get failover target of "+group, func(ctx context.Context) (*FailoverTarget, error) {
		return a.api.GetFailoverTarget(ctx, &clientv1.GetFailoverTargetRequest{Group: group})
	})
}
