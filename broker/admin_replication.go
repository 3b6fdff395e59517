package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// Operator commands and the replicator cursors (issue 20, item 4).
//
// A replicator cursor (meridian.repl.<region>) is moved only by its
// replicator, as the remote region persists entries. No admin command may
// move it: a forward reset would skip entries the remote never receives,
// and a backward one re-ships what the remote already has. Skip,
// clear-backlog, expire (backlogops.go), reset-cursor, create-subscription
// and a consumer's subscribe all refuse it. Deleting it is refused while
// its region is one of the topic's replication regions (the gap before
// the replicator recreated it would let retention trim unshipped data);
// once the region is removed, delete-replication-cursors (or a
// subscription delete) may drop it. skip-lost-entries stays allowed: it
// acknowledges only entries no reader can read, which the remote could
// never receive either.

// replicatorCursorResetError is the refusal of a reset of cursor name.
func replicatorCursorResetError(name string) error {
	return fmt.Errorf("%w: subscription %s is the replicator cursor for region %s: only its replicator moves it "+
		"(a forward reset would skip entries region %s never receives); reset-cursor applies to subscriptions",
		ErrNotAllowed, name, strings.TrimPrefix(name, ReplicatorCursorPrefix), strings.TrimPrefix(name, ReplicatorCursorPrefix))
}

// checkReplicatorCursorDelete refuses to delete the replicator cursor name
// of t while its region is one of t's replication regions (or when they
// cannot be read).
func (s *Server) checkReplicatorCursorDelete(ctx context.Context, t *topic, name string) error {
	region := strings.TrimPrefix(name, ReplicatorCursorPrefix)
	regions, err := s.ReplicationRegions(ctx, t.name)
	if err != nil {
		return fmt.Errorf("%w: subscription %s is a replicator cursor and the replication regions of %s are unknown (%v); not deleted", ErrUnavailable, name, t.name, err)
	}
	if slices.Contains(regions, region) {
		return fmt.Errorf("%w: subscription %s is the replicator cursor for region %s, still a replication region of %s: "+
			"deleting it would let retention trim entries not yet shipped; remove the region from the replication regions first "+
			"(set-replication), then delete-replication-cursors", ErrNotAllowed, name, region, t.name)
	}
	return nil
}
