package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// deadRemoteRegion starts a region ("test") whose namespace ns replicates
// to region b, registered at an address nothing listens on: b's replicator
// never ships, so its cursor, backlog and lag only grow.
func deadRemoteRegion(t *testing.T, brokers int, ns string) (*regiontest.Cluster, clientv1.MeridianClient, clientv1.AdminClient) {
	t.Helper()
	rc := regiontest.Start(t, regiontest.Options{Brokers: brokers, Bookies: 1, Broker: func(_ int, cfg *broker.Config) {
		cfg.Replication.LagHoldTimeout = time.Second
	}})
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

// editPolicies applies edit to namespace ns's policies.
func editPolicies(t *testing.T, adm clientv1.AdminClient, ns string, edit func(p *clientv1.NamespacePolicies)) {
	t.Helper()
	ctx := context.Background()
	r, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	edit(r.GetPolicies())
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: ns, Policies: r.GetPolicies()}); err != nil {
		t.Fatal(err)
	}
}

// goClient is a client of rc with a send timeout.
func goClient(t *testing.T, rc *regiontest.Cluster, sendTimeout time.Duration, topic string) *client.Producer {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(ctx, client.Options{URL: strings.Join(rc.Addrs(), ","), InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, SendTimeout: sendTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// sendUntilRefused sends with p until a send fails (the lag to the dead
// region b passes the bound) and returns the IDs acknowledged before it
// and that error.
func sendUntilRefused(t *testing.T, p *client.Producer) ([]client.MessageID, error) {
	t.Helper()
	var acked []client.MessageID
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		id, err := p.Send(ctx, &client.Message{Payload: []byte("m")})
		cancel()
		if err != nil {
			return acked, err
		}
		acked = append(acked, id)
		time.Sleep(20 * time.Millisecond) // paces the probe: ~50 sends a second
	}
	t.Fatal("no send refused within 60 s past a 1 s lag bound")
	return nil, errors.New("unreachable")
}

// TestLagBoundProducerErrorAtOnce: with max_replication_lag and action
// producer_error, a send past the bound fails at once with the broker's
// reason (QUOTA_REFUSED, "replication lag to region b is ...s, bound 1s"),
// as Pulsar's producer_exception: the client does not retry it until its
// send timeout. The refusal is final, so the producer's later sends are
// judged on their own; once the bound is lifted they are stored.
func TestLagBoundProducerErrorAtOnce(t *testing.T) {
	const ns, topic = "public/ops12", "public/ops12/t"
	rc, cli, adm := deadRemoteRegion(t, 1, ns)
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) {
		p.MaxReplicationLagMs = 1000
		p.MaxReplicationLagAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	// A send timeout far above the bound: before the fix the client
	// resent the refused batch until it, and reported ErrSendTimeout.
	p := goClient(t, rc, 20*time.Second, topic)
	acked, err := sendUntilRefused(t, p)
	t.Logf("%d acknowledged, then: %v", len(acked), err)
	if !errors.Is(err, client.ErrQuotaRefused) || !errors.Is(err, client.ErrQuotaExceeded) || errors.Is(err, client.ErrSendTimeout) {
		t.Fatalf("send past the bound: %v, want ErrQuotaRefused at once, not a send timeout", err)
	}
	if !strings.Contains(err.Error(), "replication lag to region b is ") || !strings.Contains(err.Error(), "bound 1s") {
		t.Fatalf("error %q does not give the lag to region b and the bound", err)
	}
	// The raw receipt, twice on one stream: each refusal is final and its
	// own (not "an earlier send of this stream was refused").
	rp, _ := openProducer(t, cli, topic, "raw")
	for seq := range int64(2) {
		e := rp.send(seq, []byte("x")).GetError()
		if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED || !strings.Contains(e.GetMessage(), "replication lag to region b") ||
			strings.Contains(e.GetMessage(), "earlier send") {
			t.Fatalf("raw send %d: %v, want QUOTA_REFUSED naming region b", seq, e)
		}
	}
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) { p.MaxReplicationLagMs = 0 })
	waitFor(t, "raw send stored once the bound is lifted", func() bool { return rp.send(2, []byte("y")).GetError() == nil })
	if _, err := p.Send(context.Background(), &client.Message{Payload: []byte("after")}); err != nil {
		t.Fatalf("client send after the bound was lifted: %v", err)
	}
}

// TestLagBoundHoldsFromFirstSendAfterLoad: the lag bound holds from the
// first send after a topic load: with the lag past the bound, the topic
// is unloaded (and loads again on one of two brokers); the first send
// after the load is refused (producer_error) or held (producer_hold),
// never admitted.
func TestLagBoundHoldsFromFirstSendAfterLoad(t *testing.T) {
	const ns, topic = "public/ops8", "public/ops8/t"
	rc, _, adm := deadRemoteRegion(t, 2, ns)
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) {
		p.MaxReplicationLagMs = 1000
		p.MaxReplicationLagAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	p := goClient(t, rc, 20*time.Second, topic)
	if _, err := sendUntilRefused(t, p); !errors.Is(err, client.ErrQuotaRefused) {
		t.Fatalf("send past the bound: %v", err)
	}
	ctx := context.Background()
	for i, action := range []clientv1.QuotaAction{clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD} {
		editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) { p.MaxReplicationLagAction = action })
		if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
			t.Fatal(err)
		}
		// A fresh raw producer on the new owner: its first send is the
		// first of the load.
		owner := regiontest.LookupOwner(t, rc.Addrs()[0], topic, func(string) bool { return true })
		ocli, _ := conn(t, owner)
		rp, _ := openProducer(t, ocli, topic, fmt.Sprintf("first-%d", i))
		e := rp.send(0, []byte("first")).GetError()
		t.Logf("%s: first send after the load: %v", action, e)
		switch action {
		case clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR:
			if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED {
				t.Fatalf("first send after the load: %v, want QUOTA_REFUSED", e)
			}
		default:
			// Held for LagHoldTimeout (1 s here), then refused retryably:
			// never stored.
			if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(e.GetMessage(), "replication lag to region b") {
				t.Fatalf("first send after the load: %v, want it held then QUOTA_EXCEEDED", e)
			}
		}
	}
}

// TestReplicationBacklogSeparateQuota: the consumers' backlog quota
// (backlog_quota_bytes) ignores replicator cursors, so a region that is
// down, or removed with its cursor kept, does not stop writes; the
// replication backlog has its own quota (replication_backlog_quota_bytes,
// hold or error) that acts on the regions of the replication set only;
// retention keeps the removed region's cursor (and so its data).
func TestReplicationBacklogSeparateQuota(t *testing.T) {
	const ns, topic, repl = "public/ops9", "public/ops9/t", "meridian.repl.b"
	_, cli, adm := deadRemoteRegion(t, 1, ns)
	ctx := context.Background()
	payload := randomPayload(100)
	p, _ := openProducer(t, cli, topic, "p0")
	for seq := range int64(10) {
		if r := p.send(seq, payload); r.GetError() != nil {
			t.Fatalf("send %d without quotas: %v", seq, r.GetError())
		}
	}
	waitFor(t, "replicator cursor created", func() bool { return cursorOf(t, adm, topic, repl) != nil })
	sendOne := func(name string) *clientv1.Error {
		t.Helper()
		p, _ := openProducer(t, cli, topic, name)
		return p.send(0, payload).GetError()
	}

	// ~1 KB not replicated to b; a 200-byte consumers' quota with no
	// subscription behind: nothing to refuse.
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) {
		p.BacklogQuotaBytes = proto.Int64(200)
		p.BacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	if e := sendOne("p1"); e != nil {
		t.Fatalf("send with 1 KB of replication backlog under a 200-byte consumers' quota: %v, want stored", e)
	}

	// The replication quota acts, for a region of the set: error, then hold.
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) {
		p.ReplicationBacklogQuotaBytes = proto.Int64(500)
		p.ReplicationBacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	if e := sendOne("p2"); e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED ||
		!strings.Contains(e.GetMessage(), "replication_backlog_quota_bytes 500") || !strings.Contains(e.GetMessage(), "region b") {
		t.Fatalf("send past the replication quota (producer_error): %v, want QUOTA_REFUSED naming the quota and region b", e)
	}
	editPolicies(t, adm, ns, func(p *clientv1.NamespacePolicies) {
		p.ReplicationBacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD
	})
	if e := sendOne("p3"); e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(e.GetMessage(), "replication_backlog_quota_bytes 500") {
		t.Fatalf("send past the replication quota (producer_hold): %v, want held, then QUOTA_EXCEEDED", e)
	}
	// Bad values are refused, naming the field.
	for _, bad := range []func(p *clientv1.NamespacePolicies){
		func(p *clientv1.NamespacePolicies) { p.ReplicationBacklogQuotaBytes = proto.Int64(-2) },
		func(p *clientv1.NamespacePolicies) {
			p.ReplicationBacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_CONSUMER_BACKLOG_EVICTION
		},
	} {
		r, _ := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: ns})
		bad(r.GetPolicies())
		_, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: ns, Policies: r.GetPolicies()})
		wantCode(t, "bad replication quota", err, codes.InvalidArgument, "replication_backlog_quota")
	}

	// b removed: its kept cursor counts for neither quota, and is kept.
	if _, err := adm.SetNamespaceReplication(ctx, &clientv1.SetNamespaceReplicationRequest{Namespace: ns, Regions: []string{regiontest.Region}}); err != nil {
		t.Fatal(err)
	}
	if e := sendOne("p4"); e != nil {
		t.Fatalf("send with a removed region's cursor behind both quotas: %v, want stored", e)
	}
	if cursorOf(t, adm, topic, repl) == nil {
		t.Fatal("the removed region's cursor was dropped; it must be kept until delete-replication-cursors")
	}

	// The consumers' quota still acts on a subscription.
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "slow",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	if e := sendOne("p5"); e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(e.GetMessage(), "backlog_quota_bytes 200") ||
		!strings.Contains(e.GetMessage(), "slow") {
		t.Fatalf("send past the consumers' quota: %v, want QUOTA_EXCEEDED naming subscription slow", e)
	}
}
