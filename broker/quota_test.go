package broker_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// quotaNamespace creates namespace ns with a backlog quota of limit bytes.
func quotaNamespace(t *testing.T, adm clientv1.AdminClient, ns string, limit int64, action clientv1.QuotaAction) {
	t.Helper()
	if _, err := adm.CreateNamespace(context.Background(), &clientv1.CreateNamespaceRequest{Namespace: ns,
		Policies: &clientv1.NamespacePolicies{BacklogQuotaBytes: proto.Int64(limit), BacklogQuotaAction: action}}); err != nil {
		t.Fatal(err)
	}
}

// fillQuota sends 100-byte messages until the backlog quota refuses one
// (PRODUCER_ERROR) and returns that receipt's error and the count stored.
func fillQuota(t *testing.T, p *testProducer) (*clientv1.Error, int64) {
	t.Helper()
	payload := randomPayload(100)
	for seq := int64(0); seq < 100; seq++ {
		r := p.send(seq, payload)
		if r.GetError() != nil {
			return r.GetError(), seq
		}
	}
	t.Fatal("100 sends of 100 bytes accepted under a 200-byte backlog quota")
	return nil, 0
}

// TestBacklogQuotaProducerError: past the quota a send fails at once with
// QUOTA_EXCEEDED naming the quota and the backlog; once the slow
// subscription acknowledges, sends succeed again.
func TestBacklogQuotaProducerError(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	quotaNamespace(t, adm, "public/qerr", 200, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR)
	topic := "public/qerr/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	e, stored := fillQuota(t, p)
	if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(e.GetMessage(), "backlog_quota_bytes 200") ||
		!strings.Contains(e.GetMessage(), "slow") {
		t.Fatalf("refusal: %v, want QUOTA_EXCEEDED naming backlog_quota_bytes 200 and the cursor", e)
	}
	t.Logf("refused after %d stored: %s", stored, e.GetMessage())
	c := subscribe(t, cli, topic, "slow", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last *clientv1.MessageId
	for range stored {
		last, _ = c.next()
	}
	if ae := c.ack(last, true); ae != nil {
		t.Fatal(ae)
	}
	if r := p.send(stored, []byte("after")); r.GetError() != nil {
		t.Fatalf("send after the backlog was acknowledged: %v", r.GetError())
	}
	// Bad values are refused, naming the field.
	_, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/qerr",
		Policies: &clientv1.NamespacePolicies{BacklogQuotaBytes: proto.Int64(-2)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "backlog_quota_bytes") {
		t.Fatalf("backlog_quota_bytes -2: %v", err)
	}
}

// TestBacklogQuotaProducerHold: past the quota a send is held, and
// completes once the slow subscription acknowledges.
func TestBacklogQuotaProducerHold(t *testing.T) {
	cli, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	quotaNamespace(t, adm, "public/qhold", 200, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD)
	topic := "public/qhold/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	p, _ := openProducer(t, cli, topic, "p")
	payload := randomPayload(100)
	// Two entries of ~150 bytes put the backlog past 200.
	for seq := range int64(2) {
		if r := p.send(seq, payload); r.GetError() != nil {
			t.Fatalf("send %d: %v", seq, r.GetError())
		}
	}
	receipt := make(chan *clientv1.SendReceipt, 1)
	go func() {
		// Not p.send: t.Fatal must not be called off the test goroutine.
		if err := p.st.Send(sendRequest(2, payload)); err != nil {
			receipt <- &clientv1.SendReceipt{Error: &clientv1.Error{Message: err.Error()}}
			return
		}
		r, err := p.st.Recv()
		if err != nil {
			receipt <- &clientv1.SendReceipt{Error: &clientv1.Error{Message: err.Error()}}
			return
		}
		receipt <- r.GetReceipt()
	}()
	// Held: a send that was not held is answered within milliseconds.
	select {
	case r := <-receipt:
		t.Fatalf("send past the quota answered while held: %v", r)
	case <-time.After(500 * time.Millisecond):
	}
	c := subscribe(t, cli, topic, "slow", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last *clientv1.MessageId
	for range 2 {
		last, _ = c.next()
	}
	if ae := c.ack(last, true); ae != nil {
		t.Fatal(ae)
	}
	select {
	case r := <-receipt:
		if r.GetError() != nil || r.GetMessageId() == nil {
			t.Fatalf("held send: %v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("held send not completed 30 s after the backlog was acknowledged")
	}
}

// TestReplicateQuotaRejectsThenPersists: a replicated write past the
// target's backlog quota is REJECTED (never held), with every later entry
// of the request and every later entry of its origin on the stream until
// the sender resends from it, and PERSISTED once the quota clears.
func TestReplicateQuotaRejectsThenPersists(t *testing.T) {
	cli, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	quotaNamespace(t, adm, "public/qrepl", 200, clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD)
	topic := "public/qrepl/t"
	createTopicWithSub(t, ctx, adm, topic, "slow")
	rs, _ := mustOpenRepl(t, rc.Addrs()[0], topic, "a", "test")
	var a *clientv1.ReplicateAck
	seq := int64(1)
	for ; seq < 50; seq++ {
		a = rs.roundTrip([][]byte{replEntryBytes(t, "a", seq), replEntryBytes(t, "a", seq+1)})
		if a.GetResults()[0] == rR {
			break
		}
		seq++
	}
	wantResults(t, "past the quota", a, rR, rR)
	if a.GetError().GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED || !strings.Contains(a.GetError().GetMessage(), "backlog_quota_bytes 200") {
		t.Fatalf("rejection error %v", a.GetError())
	}
	stored := seq - 1
	t.Logf("rejected at origin_seq %d: %s", seq, a.GetError().GetMessage())
	// On another stream, a rejected entry that skipped numbers (a direct
	// stream may) leaves nothing queued behind it: the skipped numbers are
	// stored when sent.
	rs2, _ := mustOpenRepl(t, rc.Addrs()[0], topic, "a", "test")
	wantResults(t, "skip past the quota", rs2.roundTrip([][]byte{replEntryBytes(t, "a", seq+5)}), rR)
	rs2.cancel()
	c := subscribe(t, cli, topic, "slow", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last *clientv1.MessageId
	for range stored {
		last, _ = c.next()
	}
	if ae := c.ack(last, true); ae != nil {
		t.Fatal(ae)
	}
	// The quota is clear, but this stream rejected origin_seq seq: a later
	// entry of a (a pipelined request sent before the sender saw the
	// rejection) is not stored above the hole.
	a = rs.roundTrip([][]byte{replEntryBytes(t, "a", seq+2)})
	wantResults(t, "after a rejection, above it", a, rR)
	t.Logf("barrier: %s", a.GetError().GetMessage())
	// The sender rewinds to the rejected entry: stored in order.
	wantResults(t, "after the quota cleared", rs.roundTrip([][]byte{replEntryBytes(t, "a", seq)}), rP)
	wantResults(t, "after the rewind", rs.roundTrip([][]byte{replEntryBytes(t, "a", seq+1), replEntryBytes(t, "a", seq+2)}), rP, rP)
	c.cancel()
	checkOrigins(t, readAll(t, cli, adm, topic, "check", int(seq+2)), map[string]int64{"a": seq + 2})
}

// randomPayload returns n incompressible bytes (sends are S2-compressed).
func randomPayload(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
