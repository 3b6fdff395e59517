package broker_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
)

// seekTopic starts one broker, creates a namespace that keeps everything
// and produces n messages "m0".."m<n-1>" to its topic; it returns the IDs,
// the producer's region and the time between m<split-1> and m<split>.
func seekTopic(t *testing.T, n, split int) (clientv1.MeridianClient, clientv1.AdminClient, string, []*clientv1.MessageId, string, int64, *regiontest.Cluster) {
	t.Helper()
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 7 })
	ctx := context.Background()
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/keep",
		Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	topic := "public/keep/seek"
	p, opened := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	var at int64
	for i := range int64(n) {
		if int(i) == split {
			time.Sleep(30 * time.Millisecond)
			at = time.Now().UnixMilli()
			time.Sleep(30 * time.Millisecond)
		}
		ids = append(ids, p.sendOK(i))
	}
	return cli, adm, topic, ids, opened.GetRegion(), at, rc
}

// seekOn sends a Seek on c's stream and returns the SeekResponse's error;
// messages received meanwhile (sent before the seek) are dropped when the
// seek succeeded, kept when it failed.
func (c *testConsumer) seekOn(sp *clientv1.StartPosition) *clientv1.Error {
	c.t.Helper()
	if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Seek{Seek: &clientv1.Seek{Position: sp, RequestId: 7}}}); err != nil {
		c.t.Fatal(err)
	}
	for {
		r, err := c.st.Recv()
		if err != nil {
			c.t.Fatalf("seek: %v", err)
		}
		if sr := r.GetSeekResponse(); sr != nil {
			if sr.GetRequestId() != 7 {
				c.t.Fatalf("seek response for request %d, want 7", sr.GetRequestId())
			}
			if sr.GetError() == nil {
				c.buf = nil
			}
			return sr.GetError()
		}
		if m := r.GetMessage(); m != nil {
			c.buf = append(c.buf, m)
		}
	}
}

// subscribeAt opens a consumer (a reader when nonDurable) with a start.
func subscribeAt(t *testing.T, cli clientv1.MeridianClient, topic, sub string, nonDurable bool, sp *clientv1.StartPosition) (*testConsumer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	st, err := cli.Consume(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	if err := st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic,
		Subscription: sub, NonDurable: nonDurable, Start: sp}}}); err != nil {
		cancel()
		return nil, err
	}
	r, err := st.Recv()
	if err != nil {
		cancel()
		return nil, err
	}
	if r.GetSubscribed() == nil {
		cancel()
		t.Fatalf("subscribe: unexpected %v", r)
	}
	_ = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1000}}})
	t.Cleanup(cancel)
	return &testConsumer{t: t, st: st, cancel: cancel}, nil
}

func startAtID(id *clientv1.MessageId) *clientv1.StartPosition {
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_MessageId{MessageId: id}}
}

func startAtTime(ms int64) *clientv1.StartPosition {
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_PublishTimeMs{PublishTimeMs: ms}}
}

func startAtOrigin(region string, l, e int64) *clientv1.StartPosition {
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Origin{Origin: &clientv1.OriginPosition{Region: region, LedgerId: l, EntryId: e}}}
}

func startInitial(p clientv1.InitialPosition) *clientv1.StartPosition {
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Initial{Initial: p}}
}

func expectPayloads(t *testing.T, c *testConsumer, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if _, p := c.next(); p != "m"+itoa(i) {
			t.Fatalf("got %s, want m%d (expecting m%d..m%d)", p, i, from, to)
		}
	}
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestSeekMessageIDLikePulsar: a seek to a message ID on a single-region
// topic makes that message the next one delivered, backwards (acknowledged
// messages are delivered again) and forwards (the ones between are
// skipped and count acknowledged), across ledgers; earliest and latest
// work; the seeking consumer's stream only carries new-position messages
// after the SeekResponse.
func TestSeekMessageIDLikePulsar(t *testing.T) {
	cli, adm, topic, ids, _, _, _ := seekTopic(t, 30, -1)
	ctx := context.Background()
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last *clientv1.MessageId
	for range 30 {
		last, _ = c.next()
	}
	if e := c.ack(last, true); e != nil {
		t.Fatal(e)
	}
	// Backwards: m5.. again.
	if e := c.seekOn(startAtID(ids[5])); e != nil {
		t.Fatalf("seek to m5: %v", e)
	}
	expectPayloads(t, c, 5, 12)
	// Forwards, while m13..m29 may still be queued for this consumer.
	if e := c.seekOn(startAtID(ids[20])); e != nil {
		t.Fatalf("seek to m20: %v", e)
	}
	expectPayloads(t, c, 20, 29)
	// The skipped ones count acknowledged: after acking m20..m29 the backlog is empty.
	if e := c.ack(ids[29], true); e != nil {
		t.Fatal(e)
	}
	waitFor(t, "backlog 0 after the forward seek", func() bool {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		return err == nil && len(st.GetSubscriptions()) == 1 && st.GetSubscriptions()[0].GetBacklogEntries() == 0
	})
	if e := c.seekOn(startInitial(clientv1.InitialPosition_INITIAL_POSITION_EARLIEST)); e != nil {
		t.Fatal(e)
	}
	expectPayloads(t, c, 0, 3)
	if e := c.seekOn(startInitial(clientv1.InitialPosition_INITIAL_POSITION_LATEST)); e != nil {
		t.Fatal(e)
	}
	p, _ := openProducer(t, cli, topic, "p2")
	p.sendOK(30)
	expectPayloads(t, c, 30, 30)
	// A persisted reset: the admin reset to an ID resolves the same way.
	if _, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s",
		Position: &clientv1.ResetSubscriptionRequest_MessageId{MessageId: ids[17]}}); err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, c, 17, 18)
}

// TestSeekByTimeAndOriginSingleRegion: a time start delivers exactly the
// messages published at or after it; an origin position of this region is
// its local position; readers start there too and go away with their
// stream, holding nothing.
func TestSeekByTimeAndOriginSingleRegion(t *testing.T) {
	cli, adm, topic, ids, region, at, _ := seekTopic(t, 20, 12)
	ctx := context.Background()
	r, err := subscribeAt(t, cli, topic, "", true, startAtTime(at))
	if err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, r, 12, 19)
	o, err := subscribeAt(t, cli, topic, "origin-reader", true, startAtOrigin(region, ids[3].LedgerId, ids[3].EntryId))
	if err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, o, 3, 19)
	// A durable subscription created at a start.
	d, err := subscribeAt(t, cli, topic, "durable", false, startAtTime(at))
	if err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, d, 12, 19)
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetSubscriptions()); n != 3 {
		t.Fatalf("%d subscriptions while two readers and one durable are connected, want 3", n)
	}
	r.cancel()
	o.cancel()
	waitFor(t, "readers removed with their streams", func() bool {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		return err == nil && len(st.GetSubscriptions()) == 1 && st.GetSubscriptions()[0].GetName() == "durable"
	})
	// A reader's name collides with no durable subscription.
	if _, err := subscribeAt(t, cli, topic, "durable", true, nil); code(err) != clientv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("reader named like a durable subscription: %v", err)
	}
	// Reset by time and by origin position through the admin API.
	if _, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "durable",
		Position: &clientv1.ResetSubscriptionRequest_OriginPosition{OriginPosition: &clientv1.OriginPosition{Region: region, LedgerId: ids[8].LedgerId, EntryId: ids[8].EntryId}}}); err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, d, 8, 9)
	// An admin reset does not cut the stream: what was queued for it
	// before may still arrive, so check the reset with a new consumer.
	d.cancel()
	waitFor(t, "durable consumer gone", func() bool {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		return err == nil && len(st.GetSubscriptions()) == 1 && len(st.GetSubscriptions()[0].GetConsumers()) == 0
	})
	if _, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "durable",
		Position: &clientv1.ResetSubscriptionRequest_PublishTimeMs{PublishTimeMs: at}}); err != nil {
		t.Fatal(err)
	}
	d = subscribe(t, cli, topic, "durable", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	expectPayloads(t, d, 12, 13)
}

// TestSeekBadInput: unknown origin positions, bad fields and unset
// positions get a clear error naming the field, and change nothing.
func TestSeekBadInput(t *testing.T) {
	cli, adm, topic, ids, region, _, rc := seekTopic(t, 10, -1)
	ctx := context.Background()
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	expectPayloads(t, c, 0, 1)
	check := func(what string, e *clientv1.Error, want clientv1.ErrorCode, mention ...string) {
		t.Helper()
		if e == nil || e.GetCode() != want {
			t.Fatalf("%s: got %v, want %v", what, e, want)
		}
		for _, m := range mention {
			if !strings.Contains(e.GetMessage(), m) {
				t.Fatalf("%s: error %q does not mention %q", what, e.GetMessage(), m)
			}
		}
		t.Logf("%s: %s", what, e.GetMessage())
	}
	nf, inv := clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	check("unknown origin region", c.seekOn(startAtOrigin("zz", 1, 2)), nf, "seek.position.origin", "zz")
	check("origin entry past the end", c.seekOn(startAtOrigin(region, ids[9].LedgerId, ids[9].EntryId+5)), nf, "seek.position.origin")
	check("origin bad region name", c.seekOn(startAtOrigin("bad/name", 1, 2)), inv, "seek.position.origin.region")
	check("origin negative entry", c.seekOn(startAtOrigin(region, 1, -2)), inv, "seek.position.origin")
	check("message ID of no retained ledger", c.seekOn(startAtID(&clientv1.MessageId{LedgerId: 987654321, EntryId: 0})), nf, "seek.position.message_id")
	check("negative time", c.seekOn(startAtTime(-5)), inv, "seek.position.publish_time_ms")
	check("unset", c.seekOn(nil), inv, "seek.position is unset")
	check("bad initial", c.seekOn(startInitial(9)), inv, "seek.position.initial")
	// Nothing moved: the stream goes on with m2.
	expectPayloads(t, c, 2, 3)
	if _, err := subscribeAt(t, cli, topic, "", true, startAtOrigin("zz", 1, 1)); code(err) != nf || !strings.Contains(err.Error(), "start.origin") {
		t.Fatalf("reader at an unknown origin: %v", err)
	}
	if _, err := subscribeAt(t, cli, topic, "new", false, startAtOrigin("zz", 1, 1)); code(err) != nf {
		t.Fatalf("durable subscription at an unknown origin: %v", err)
	}
	st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetSubscriptions()); n != 1 {
		t.Fatalf("%d subscriptions after refused starts, want 1 (nothing created)", n)
	}
	_, err = adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s",
		Position: &clientv1.ResetSubscriptionRequest_OriginPosition{OriginPosition: &clientv1.OriginPosition{Region: "zz", LedgerId: 1}}})
	if code(err) != nf || !strings.Contains(err.Error(), "position.origin") {
		t.Fatalf("reset to an unknown origin: %v", err)
	}
	// The resolutions are counted, by kind and result, and so are the
	// entries their scans read.
	resp, err := http.Get("http://" + rc.Broker(0).HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`meridian_broker_seek_resolutions_total{kind="origin",result="error"} 7`,
		`meridian_broker_seek_resolutions_total{kind="time",result="error"} 1`, "meridian_broker_seek_resolution_seconds_count"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
	if strings.Contains(string(body), "meridian_broker_seek_scanned_entries_total 0\n") {
		t.Fatal("no scanned entries counted (the unknown-origin searches scan the log)")
	}
}

// TestSeekSharedDisconnectsOthers: a seek on a Shared subscription
// disconnects its other consumers (what they hold predates the seek), as
// Pulsar does; the seeking consumer keeps its stream and receives from the
// new position.
func TestSeekSharedDisconnectsOthers(t *testing.T) {
	cli, _, topic, ids, _, _, _ := seekTopic(t, 10, -1)
	shared := clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED
	c1 := subscribe(t, cli, topic, "sh", shared)
	c2 := subscribe(t, cli, topic, "sh", shared)
	if e := c1.seekOn(startAtID(ids[6])); e != nil {
		t.Fatal(e)
	}
	for {
		r, err := c2.st.Recv()
		if err != nil {
			t.Logf("other consumer disconnected: %v", err)
			break
		}
		_ = r // messages sent to it before the seek
	}
	expectPayloads(t, c1, 6, 9)
}
