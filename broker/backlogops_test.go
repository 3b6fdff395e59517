package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// subStat returns subscription sub's stats (nil if absent).
func subStat(t *testing.T, adm clientv1.AdminClient, topic, sub string) *clientv1.SubscriptionStats {
	t.Helper()
	st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatalf("stats of %s: %v", topic, err)
	}
	for _, s := range st.GetSubscriptions() {
		if s.GetName() == sub {
			return s
		}
	}
	return nil
}

// oneResult checks a backlog operation's answer for one subscription.
func oneResult(t *testing.T, what string, r *clientv1.BacklogOpResponse, err error, acked, backlog int64, md *clientv1.MessageId) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(r.GetSubscriptions()) != 1 {
		t.Fatalf("%s: %v, want one subscription", what, r)
	}
	s := r.GetSubscriptions()[0]
	if s.GetAcknowledgedEntries() != acked || s.GetBacklogEntries() != backlog ||
		md != nil && !proto.Equal(s.GetMarkDeletePosition(), &clientv1.MessageId{LedgerId: md.GetLedgerId(), EntryId: md.GetEntryId()}) {
		t.Fatalf("%s: %v, want %d acknowledged, backlog %d, mark-delete %v", what, s, acked, backlog, md)
	}
}

// TestSkipClearExpireLocal: skip acknowledges the next N unacknowledged
// entries (an individually acknowledged one is not counted), delivery
// resumes after them; expire acknowledges only the entries published
// before the cutoff; clear-backlog acknowledges the rest, for one
// subscription or all of them; bad requests change nothing.
func TestSkipClearExpireLocal(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 4 })
	ctx := context.Background()
	topic := "public/default/backlogops"
	createTopicWithSub(t, ctx, adm, topic, "s")
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "other",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(10) {
		ids = append(ids, p.sendOK(i))
	}
	old := time.Now()
	time.Sleep(1500 * time.Millisecond) // the entries above are older than 1 s
	for i := range int64(5) {
		ids = append(ids, p.sendOK(10+i))
	}

	// Bad requests: a clear error naming the field, nothing changed.
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error {
			_, err := adm.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: "s", Entries: 0})
			return err
		}(), "entries 0"},
		{func() error {
			_, err := adm.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: "s", AllSubscriptions: true, Entries: 1})
			return err
		}(), "not both"},
		{func() error {
			_, err := adm.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: topic, Subscription: "s", ExpireTimeSeconds: -1})
			return err
		}(), "expire_time_seconds -1"},
		{func() error { _, err := adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic}); return err }(), "subscription"},
	} {
		if status.Code(c.err) != codes.InvalidArgument || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("bad request: %v, want InvalidArgument naming %q", c.err, c.want)
		}
	}
	if _, err := adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, Subscription: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("clear-backlog of an unknown subscription: %v, want NotFound", err)
	}
	if s := subStat(t, adm, topic, "s"); s.GetBacklogEntries() != 15 {
		t.Fatalf("bad requests changed the backlog: %v", s)
	}

	r, err := adm.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: "s", Entries: 3})
	oneResult(t, "skip 3", r, err, 3, 12, ids[2])
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	if _, got := c.next(); got != "m3" {
		t.Fatalf("first message after skip 3: %q, want m3", got)
	}
	for range 11 { // m4..m14 delivered, held unacknowledged
		c.next()
	}
	if e := c.ack(ids[5], false); e != nil {
		t.Fatal(e)
	}
	// m3, m4, m6: m5 was acknowledged already.
	r, err = adm.SkipMessages(ctx, &clientv1.SkipMessagesRequest{Topic: topic, Subscription: "s", Entries: 3})
	oneResult(t, "skip 3 over an acknowledged entry", r, err, 3, 8, ids[6])

	// The cutoff (now - whole seconds since old) is after the first ten
	// were published and before the last five: m7..m9 expire.
	r, err = adm.ExpireMessages(ctx, &clientv1.ExpireMessagesRequest{Topic: topic, Subscription: "s",
		ExpireTimeSeconds: int64(time.Since(old) / time.Second)})
	oneResult(t, "expire", r, err, 3, 5, ids[9])
	if s := subStat(t, adm, topic, "s"); s.GetBacklogEntries() != 5 || s.GetExpiredEntriesTotal() != 3 {
		t.Fatalf("after expire: %v, want backlog 5 (m10..m14) and 3 expired", s)
	}
	// Delivered but unacknowledged entries that were skipped are not
	// redelivered: a redelivery request brings back only m10..m14.
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Redeliver{Redeliver: &clientv1.Redeliver{}}}); err != nil {
		t.Fatal(err)
	}
	if _, got := c.next(); got != "m10" {
		t.Fatalf("first redelivery after skip/expire: %q, want m10", got)
	}

	r, err = adm.ClearBacklog(ctx, &clientv1.ClearBacklogRequest{Topic: topic, AllSubscriptions: true})
	if err != nil || len(r.GetSubscriptions()) != 2 {
		t.Fatalf("clear-backlog --all-subscriptions: %v %v", r, err)
	}
	for _, s := range r.GetSubscriptions() {
		want := map[string]int64{"other": 15, "s": 5}[s.GetSubscription()]
		md := s.GetMarkDeletePosition()
		if s.GetAcknowledgedEntries() != want || s.GetBacklogEntries() != 0 || md.GetLedgerId() != ids[14].GetLedgerId() || md.GetEntryId() != ids[14].GetEntryId() {
			t.Fatalf("clear-backlog: %v, want %d acknowledged, backlog 0, mark-delete at the last entry", s, want)
		}
	}
	// Persisted: the cursors survive an unload.
	c.cancel()
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cursors reloaded at the last entry", func() bool {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		return err == nil && len(st.GetSubscriptions()) == 2 && st.GetBacklogEntries() == 0
	})
	p2, _ := openProducer(t, cli, topic, "p2") // the unload ended p's stream
	p2.sendOK(15)
	c2 := subscribe(t, cli, topic, "other", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, got := c2.next(); got != "m15" {
		t.Fatalf("first message after clear-backlog: %q, want m15", got)
	}
}
