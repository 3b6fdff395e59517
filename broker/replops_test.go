package broker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
)

// deadRemoteRegion starts a region ("test") whose namespace ns replicates
// to region b, registered at an address nothing listens on: b's replicator
// never ships, so its cursor, backlog and lag only grow.
func deadRemoteRegion(t *testing.T, brokers int, ns string) (*regiontest.Cluster, clientv1.MeridianClient, clientv1.AdminClient) {
	t.Helper()
	rc := regiontest.Start(t, regiontest.Options{Brokers: brokers, Bookies: 1})
	cli, adm := conn(t, rc.Addrs()[0])
	registerRegion(t, rc.Global, "b", "127.0.0.1:1")
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: ns, Regions: []string{regiontest.Region, "b"}}); err != nil {
		t.Fatal(err)
	}
	return rc, cli, adm
}

// cursorOf returns topic's cursor name from the internal stats (nil when
// there is none).
func cursorOf(t *testing.T, adm clientv1.AdminClient, topic, name string) *clientv1.CursorInfo {
	t.Helper()
	st, err := adm.GetTopicInternalStats(context.Background(), &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.GetCursors() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// TestReplicatorCursorAdminOpsRefused: no admin command moves or deletes
// the replicator cursor of a region in the replication set (reset-cursor
// to an ID, a time, earliest and latest; subscription delete with and
// without force; skip, clear-backlog, expire; create-subscription; a
// consumer's subscribe, so no unsubscribe or seek either); each refusal
// names the cursor and leaves it where it was. Once the region is
// removed, its cursor may be deleted.
func TestReplicatorCursorAdminOpsRefused(t *testing.T) {
	const ns, topic, repl = "public/ops4", "public/ops4/t", "meridian.repl.b"
	_, cli, adm := deadRemoteRegion(t, 1, ns)
	ctx := context.Background()
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range 5 {
		ids = append(ids, p.sendOK(int64(i)))
	}
	waitFor(t, "replicator cursor created", func() bool { return cursorOf(t, adm, topic, repl) != nil })
	before := cursorOf(t, adm, topic, repl).GetMarkDeletePosition()

	resets := map[string]*clientv1.ResetSubscriptionRequest{
		"message id": {Topic: topic, Subscription: repl, Position: &clientv1.ResetSubscriptionRequest_MessageId{MessageId: ids[3]}},
		"time":       {Topic: topic, Subscription: repl, Position: &clientv1.ResetSubscriptionRequest_PublishTimeMs{PublishTimeMs: time.Now().UnixMilli()}},
		"latest":     {Topic: topic, Subscription: repl, Position: &clientv1.ResetSubscriptionRequest_InitialPosition{InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_LATEST}},
		"earliest":   {Topic: topic, Subscription: repl, Position: &clientv1.ResetSubscriptionRequest_InitialPosition{InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}},
	}
	for what, r := range resets {
		_, err := adm.ResetSubscription(ctx, r)
		wantCode(t, "reset-cursor of the replicator cursor to "+what, err, codes.FailedPrecondition, repl, "replicator cursor")
	}
	for _, force := range []bool{false, true} {
		_, err := adm.DeleteSubscription(ctx, &clientv1.DeleteSubscriptionRequest{Topic: topic, Subscription: repl, Force: force})
		wantCode(t, fmt.Sprintf("delete of the replicator cursor (force=%v)", force), err, codes.FailedPrecondition, repl, "still a replication region")
	}
	_, err := adm.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: repl, Entries: 2})
	wantCode(t, "skip", err, codes.FailedPrecondition, "replicator cursor")
	_, err = adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: repl})
	wantCode(t, "clear-backlog", err, codes.FailedPrecondition, "replicator cursor")
	_, err = adm.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: topic, Subscription: repl, ExpireTimeSeconds: 0})
	wantCode(t, "expire", err, codes.FailedPrecondition, "replicator cursor")
	_, err = adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: repl})
	wantCode(t, "create-subscription", err, codes.InvalidArgument, "replicators' cursors")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cli.Consume(cctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: repl}}})
	if r, err := st.Recv(); err == nil {
		t.Fatalf("subscribe to the replicator cursor: %v, want refused (so no unsubscribe, seek or ack reaches it)", r)
	} else {
		wantCode(t, "subscribe", err, codes.InvalidArgument, "replicators' cursors")
	}
	after := cursorOf(t, adm, topic, repl)
	if after == nil || after.GetMarkDeletePosition().GetLedgerId() != before.GetLedgerId() || after.GetMarkDeletePosition().GetEntryId() != before.GetEntryId() {
		t.Fatalf("replicator cursor after the refused commands: %v, want it unchanged at %v", after, before)
	}

	// b removed from the replication: its kept cursor may go.
	if _, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: ns, Regions: []string{regiontest.Region}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteSubscription(ctx, &clientv1.DeleteSubscriptionRequest{Topic: topic, Subscription: repl}); err != nil {
		t.Fatalf("delete of a removed region's cursor: %v", err)
	}
	ls, err := adm.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
	if err != nil || slices.Contains(ls.GetSubscriptions(), repl) {
		t.Fatalf("subscriptions after the delete: %v %v", ls, err)
	}
}
