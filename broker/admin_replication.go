package broker

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// DeleteReplicationCursors implements the admin RPC (see
// Server.DeleteReplicatorCursors).
func (a *adminService) DeleteReplicationCursors(ctx context.Context, r *clientv1.DeleteReplicationCursorsRequest) (*clientv1.DeleteReplicationCursorsResponse, error) {
	topics, err := a.b.DeleteReplicatorCursors(ctx, r.GetNamespace(), r.GetRegion(), r.GetConfirm())
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.DeleteReplicationCursorsResponse{Topics: topics, Applied: r.GetConfirm()}, nil
}
