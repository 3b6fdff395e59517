package client

import (
	"context"
	"fmt"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// BacklogTarget names the subscriptions a backlog operation moves: one
// subscription, or every durable subscription of the topic (All;
// replicator cursors and readers never).
type BacklogTarget struct {
	Subscription string
	All          bool
}

// SkipMessages acknowledges the next n unacknowledged entries (entries:
// one producer batch each) of the target subscriptions. Not idempotent: a
// call whose outcome is unknown (a timeout) may have skipped. On a
// replicated subscription the move reaches the other regions.
func (a *Admin) SkipMessages(ctx context.Context, topic string, tg BacklogTarget, n int64) ([]*clientv1.BacklogOpResult, error) {
	var r *clientv1.BacklogOpResponse
	err := write(ctx, a, fmt.Sprintf("skip %d entries on %s", n, topic), func(ctx context.Context) error {
		var err error
		r, err = a.api.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: tg.Subscription, AllSubscriptions: tg.All, Entries: n})
		return err
	})
	return r.GetSubscriptions(), err
}

// ClearBacklog acknowledges everything stored on the target subscriptions
// (idempotent).
func (a *Admin) ClearBacklog(ctx context.Context, topic string, tg BacklogTarget) ([]*clientv1.BacklogOpResult, error) {
	r, err := read(ctx, a, "clear backlog of "+topic, func(ctx context.Context) (*clientv1.BacklogOpResponse, error) {
		return a.api.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: tg.Subscription, AllSubscriptions: tg.All})
	})
	return r.GetSubscriptions(), err
}

// ExpireMessages acknowledges, on the target subscriptions, the messages
// published more than olderThanSeconds ago (idempotent for a given cutoff;
// retried while the owner is unavailable).
func (a *Admin) ExpireMessages(ctx context.Context, topic string, tg BacklogTarget, olderThanSeconds int64) ([]*clientv1.BacklogOpResult, error) {
	r, err := read(ctx, a, "expire messages of "+topic, func(ctx context.Context) (*clientv1.BacklogOpResponse, error) {
		return a.api.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: topic, Subscription: tg.Subscription, AllSubscriptions: tg.All, ExpireTimeSeconds: olderThanSeconds})
	})
	return r.GetSubscriptions(), err
}
