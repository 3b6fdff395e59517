package broker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func oneBroker(t *testing.T, tweak func(*broker.Config)) (clientv1.MeridianClient, clientv1.AdminClient, *regiontest.Cluster) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1, Broker: func(_ int, c *broker.Config) {
		c.RetentionInterval = 100 * time.Millisecond
		if tweak != nil {
			tweak(c)
		}
	}})
	cli, adm := conn(t, rc.Addrs()[0])
	return cli, adm, rc
}

func TestRetentionDeletesOnlyConsumedLedgers(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 10 })
	ctx := context.Background()
	topic := "public/default/retention"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(50) {
		p.sendOK(i)
	}
	st0, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(st0.Ledgers) < 5 {
		t.Fatalf("rollover: %d ledgers for 50 entries at 10 per ledger", len(st0.Ledgers))
	}
	// Nothing is acknowledged: retention (0/0) must keep everything.
	time.Sleep(500 * time.Millisecond)
	st1, _ := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if len(st1.Ledgers) != len(st0.Ledgers) {
		t.Fatalf("retention deleted unacknowledged ledgers: %d -> %d", len(st0.Ledgers), len(st1.Ledgers))
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var ids []*clientv1.MessageId
	for range 25 {
		id, _ := c.next()
		ids = append(ids, id)
	}
	if e := c.ack(ids[24], true); e != nil {
		t.Fatal(e)
	}
	waitFor(t, "retention to delete consumed ledgers", func() bool {
		st, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
		return err == nil && len(st.Ledgers) <= len(st0.Ledgers)-2 && st.StorageSizeBytes < st0.StorageSizeBytes
	})
	st2, _ := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	t.Logf("ledgers %d -> %d, storage %d -> %d bytes", len(st0.Ledgers), len(st2.Ledgers), st0.StorageSizeBytes, st2.StorageSizeBytes)
	// Every unacknowledged message is still readable.
	c.cancel()
	c2 := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for i := 25; i < 50; i++ {
		_, payload := c2.next()
		if payload != fmt.Sprintf("m%d", i) {
			t.Fatalf("after retention got %q, want m%d", payload, i)
		}
	}
}

func TestCursorAndDedupSurviveUnload(t *testing.T) {
	cli, adm, _ := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 7; c.CursorPersistInterval = 50 * time.Millisecond })
	ctx := context.Background()
	topic := "public/default/unload"
	// Subscribe first: retention (0/0, every 100 ms) deletes the ledgers of
	// a topic without subscriptions, which made this test flaky under load.
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, opened := openProducer(t, cli, topic, "dp")
	if opened.LastSequenceId != -1 {
		t.Fatalf("new producer last sequence %d", opened.LastSequenceId)
	}
	ids := make([]*clientv1.MessageId, 20)
	for i := range int64(20) {
		ids[i] = p.sendOK(i)
	}
	id19 := ids[19]
	// A duplicate is answered with the ID it was first stored under when
	// the broker still knows it (recent batches), else with none.
	if r := p.send(3, []byte("again")); !r.GetDuplicate() || r.GetError() != nil || r.GetMessageId() != nil && !proto.Equal(r.GetMessageId(), ids[3]) {
		t.Fatalf("resend of 3: %v, first stored at %v", r, ids[3])
	}
	if r := p.send(17, []byte("again")); !r.GetDuplicate() || r.GetError() != nil || !proto.Equal(r.GetMessageId(), ids[17]) {
		t.Fatalf("resend of recent 17: %v, first stored at %v", r, ids[17])
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	for i := range 10 {
		id, payload := c.next()
		if payload != fmt.Sprintf("m%d", i) {
			t.Fatalf("got %q want m%d", payload, i)
		}
		if i != 5 { // leave a hole: m5 stays unacknowledged
			if e := c.ack(id, false); e != nil {
				t.Fatal(e)
			}
		}
	}
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	// The reloaded topic remembers the producer's sequence and the cursor.
	p2, opened2 := openProducer(t, cli, topic, "dp")
	if opened2.LastSequenceId != 19 {
		t.Fatalf("after reload last sequence %d, want 19", opened2.LastSequenceId)
	}
	// The last batch: a duplicate answered with where it was first stored.
	if r := p2.send(19, []byte("dup")); !r.GetDuplicate() || !proto.Equal(r.GetMessageId(), id19) {
		t.Fatalf("resend of 19 after reload: %v, first stored at %v", r, id19)
	}
	c2 := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	want := []string{"m5", "m10", "m11"}
	for _, w := range want {
		_, payload := c2.next()
		if payload != w {
			t.Fatalf("after reload got %q, want %q", payload, w)
		}
	}
}

func code(err error) clientv1.ErrorCode {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if e, ok := d.(*clientv1.Error); ok {
			return e.Code
		}
	}
	return clientv1.ErrorCode_ERROR_CODE_UNSPECIFIED
}

func TestBadInputGetsClearErrorsAndChangesNothing(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	inv := clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	check := func(what string, err error, want clientv1.ErrorCode, mention string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: accepted", what)
		}
		if code(err) != want || !strings.Contains(err.Error(), mention) {
			t.Fatalf("%s: got %v (code %v), want %v mentioning %q", what, err, code(err), want, mention)
		}
		t.Logf("%s: %v", what, status.Convert(err).Message())
	}
	_, err := adm.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: "bad/tenant"})
	check("tenant name", err, inv, "allowed")
	_, err = adm.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: strings.Repeat("x", 200)})
	check("tenant length", err, inv, "limit 128")
	_, err = adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "public/ns1",
		Policies: &clientv1.NamespacePolicies{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 3}})
	check("ack quorum", err, inv, "ack_quorum")
	_, err = adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "nosuch/ns"})
	check("missing tenant", err, clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, "nosuch")
	nss, _ := adm.ListNamespaces(ctx, &clientv1.ListNamespacesRequest{Tenant: "public"})
	if len(nss.Namespaces) != 1 {
		t.Fatalf("a refused create changed namespaces: %v", nss.Namespaces)
	}
	before, _ := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "public/default"})
	_, err = adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/default", Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: -5}})
	check("retention", err, inv, "retention_time_seconds")
	after, _ := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "public/default"})
	if !proto.Equal(before, after) {
		t.Fatalf("refused policy change applied: %v -> %v", before, after)
	}
	_, err = cli.Lookup(ctx, &clientv1.LookupRequest{Topic: "public/default"})
	check("topic shape", err, inv, "tenant/namespace/topic")
	_, err = cli.Lookup(ctx, &clientv1.LookupRequest{Topic: "public/nosuch/t"})
	check("unknown namespace", err, clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, "public/nosuch")

	topic := "public/default/bad"
	p, _ := openProducer(t, cli, topic, "p")
	big := make([]byte, 5<<20+1000)
	rand.Read(big) // incompressible: the compressed batch stays over the limit
	r := p.send(0, big)
	if r.GetError().GetCode() != clientv1.ErrorCode_ERROR_CODE_MESSAGE_TOO_LARGE || !strings.Contains(r.GetError().GetMessage(), "limit") {
		t.Fatalf("oversize: %v", r)
	}
	t.Logf("oversize: %s", r.GetError().GetMessage())
	p.sendOK(1)
	st, _ := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if st.Entries != 1 {
		t.Fatalf("refused send stored: %d entries", st.Entries)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cs, _ := cli.Consume(cctx)
	cs.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{Topic: topic, Subscription: "s", Type: 9}}})
	_, err = cs.Recv()
	check("subscription type", err, inv, "subscription type 9")
	subs, _ := adm.ListSubscriptions(ctx, &clientv1.ListSubscriptionsRequest{Topic: topic})
	if len(subs.Subscriptions) != 0 {
		t.Fatalf("refused subscribe created %v", subs.Subscriptions)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("grpc code %v", status.Code(err))
	}
}
