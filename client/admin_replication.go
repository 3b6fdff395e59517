package client

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Replication admin types (package api/client/v1).
type (
	// TenantInfo is a tenant's allowed regions.
	TenantInfo = clientv1.TenantInfo
	// TopicReplication is a topic's override and effective regions.
	TopicReplication = clientv1.GetTopicReplicationResponse
	// RegionStatus is one region of the global region registry with its
	// endpoints, reachability and replication lag.
	RegionStatus = clientv1.RegionStatus
)

// SetNamespaceReplication sets the regions a namespace's topics replicate
// to (empty = off). Every region must be registered and allowed by the
// tenant; the error names the first one that is not.
func (a *Admin) SetNamespaceReplication(ctx context.Context, namespace string, regions []string) error {
	return write(ctx, a, "set replication of "+namespace, func(ctx context.Context) error {
		_, err := a.api.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: namespace, Regions: regions})
		return err
	})
}

// GetNamespaceReplication returns a namespace's replication regions and
// whether the broker answered from its last seen copy (stale: the global
// metadata shard was unreachable).
func (a *Admin) GetNamespaceReplication(ctx context.Context, namespace string) (regions []string, stale bool, err error) {
	r, err := read(ctx, a, "get replication of "+namespace, func(ctx context.Context) (*clientv1.GetNamespaceReplicationResponse, error) {
		return a.api.GetNamespaceReplication(ctx, &clientv1.GetNamespaceReplicationRequest{Namespace: namespace})
	})
	return r.GetRegions(), r.GetStale(), err
}

// GetTenant returns a tenant's allowed regions.
func (a *Admin) GetTenant(ctx context.Context, tenant string) (*TenantInfo, error) {
	return read(ctx, a, "get tenant "+tenant, func(ctx context.Context) (*clientv1.TenantInfo, error) {
		return a.api.GetTenant(ctx, &clientv1.GetTenantRequest{Tenant: tenant})
	})
}

// SetTenantAllowedRegions replaces a tenant's allowed regions (empty =
// every region).
func (a *Admin) SetTenantAllowedRegions(ctx context.Context, tenant string, regions []string) error {
	return write(ctx, a, "set allowed regions of "+tenant, func(ctx context.Context) error {
		_, err := a.api.SetTenantAllowedRegions(ctx, &clientv1.SetTenantAllowedRegionsRequest{Tenant: tenant, AllowedRegions: regions})
		return err
	})
}

// SetTopicReplication sets a topic's own replication regions, overriding
// its namespace's (empty = the topic does not replicate).
func (a *Admin) SetTopicReplication(ctx context.Context, topic string, regions []string) error {
	return write(ctx, a, "set replication of "+topic, func(ctx context.Context) error {
		_, err := a.api.SetTopicReplication(ctx, &clientv1.SetTopicReplicationRequest{Topic: topic, Regions: regions})
		return err
	})
}

// GetTopicReplication returns a topic's override, if any, and the regions
// it effectively replicates to.
func (a *Admin) GetTopicReplication(ctx context.Context, topic string) (*TopicReplication, error) {
	return read(ctx, a, "get replication of "+topic, func(ctx context.Context) (*clientv1.GetTopicReplicationResponse, error) {
		return a.api.GetTopicReplication(ctx, &clientv1.GetTopicReplicationRequest{Topic: topic})
	})
}

// RemoveTopicReplication removes a topic's override: it follows its
// namespace again.
func (a *Admin) RemoveTopicReplication(ctx context.Context, topic string) error {
	return write(ctx, a, "remove replication of "+topic, func(ctx context.Context) error {
		_, err := a.api.RemoveTopicReplication(ctx, &clientv1.RemoveTopicReplicationRequest{Topic: topic})
		return err
	})
}

// ListRegions lists the registered regions with their endpoints,
// reachability from the answering broker and replication lag.
func (a *Admin) ListRegions(ctx context.Context) ([]*RegionStatus, error) {
	r, err := read(ctx, a, "list regions", func(ctx context.Context) (*clientv1.ListRegionsResponse, error) {
		return a.api.ListRegions(ctx, &clientv1.ListRegionsRequest{})
	})
	return r.GetRegions(), err
}

// DeleteReplicationCursors deletes, in the answering broker's region, the
// replicator cursors (`meridian.repl.<region>`) of every topic of
// namespace, for a region the namespace no longer replicates to. Without
// confirm it changes nothing and returns the topics it would touch. It
// never deletes data in the removed region.
func (a *Admin) DeleteReplicationCursors(ctx context.Context, namespace, region string, confirm bool) (topics []string, applied bool, err error) {
	what := "delete replication cursors of " + namespace + " towards " + region
	call := func(ctx context.Context) (*clientv1.DeleteReplicationCursorsResponse, error) {
		return a.api.DeleteReplicationCursors(ctx, &clientv1.DeleteReplicationCursorsRequest{Namespace: namespace, Region: region, Confirm: confirm})
	}
	var r *clientv1.DeleteReplicationCursorsResponse
	if confirm {
		err = write(ctx, a, what, func(ctx context.Context) error {
			var e error
			r, e = call(ctx)
			return e
		})
	} else {
		r, err = read(ctx, a, what, call)
	}
	return r.GetTopics(), r.GetApplied(), err
}
