package region_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
)

// Replicated subscriptions across regions (broker/subsync*.go).

// repSubNamespace is the namespace of these tests.
const repSubNamespace = "public/repsub"

// repSubClient connects a client to region.
func repSubClient(t *testing.T, g *geoCluster, region string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, g.clientOptions(region))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return cl
}

// repSubProduce sends messages n = 0..count-1 to topic in region, one
// message per entry (so acknowledging a message acknowledges its entry).
func repSubProduce(t *testing.T, g *geoCluster, region, topic string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := repSubClient(t, g, region).NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		if _, err := p.Send(ctx, &client.Message{Payload: fmt.Appendf(nil, "m%d", i), Properties: map[string]string{"n": strconv.Itoa(i)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// subStats returns the stats of subscription sub of topic in region (nil
// while the topic or the subscription does not exist there).
func (g *geoCluster) subStats(region, topic, sub string) *clientv1.SubscriptionStats {
	st, err := g.stats(region, topic)
	if err != nil {
		return nil
	}
	for _, s := range st.GetSubscriptions() {
		if s.GetName() == sub {
			return s
		}
	}
	return nil
}

// ackRepl returns the subscription's ack replication towards remote.
func ackRepl(s *clientv1.SubscriptionStats, remote string) *clientv1.AckReplicationStats {
	for _, a := range s.GetAckReplication() {
		if a.GetRegion() == remote {
			return a
		}
	}
	return nil
}

// repSubMove is the move test of one subscription type: count messages
// produced in a; a consumer of a replicated subscription in a receives the
// first half and acknowledges every second message, then leaves; a
// consumer in b must receive every message not acknowledged in a (no
// loss), and at most as many acknowledged ones as a had not replicated at
// the move (duplicates, asserted and logged).
func repSubMove(t *testing.T, g *geoCluster, topic string, typ client.SubscriptionType, count int) {
	repSubMovePaced(t, g, topic, typ, count, 0)
}

// repSubMovePaced is repSubMove with the consumer in a acknowledging at
// most one message per pace, after a's stream to b is open (pace 0: as
// fast as it can, right after subscribing).
func repSubMovePaced(t *testing.T, g *geoCluster, topic string, typ client.SubscriptionType, count int, pace time.Duration) {
	const sub = "rs"
	repSubProduce(t, g, "a", topic, count)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: typ, InitialPosition: client.Earliest, Replicated: true}
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if pace > 0 {
		waitCond(t, 60*time.Second, "a's subscription stream to b is open", func() bool {
			a := ackRepl(g.subStats("a", topic, sub), "b")
			return a != nil && a.GetConnected()
		})
	}
	acked := map[int]bool{}
	var ackTimes []time.Time
	for range count / 2 {
		if pace > 0 {
			time.Sleep(pace)
		}
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if n%2 == 0 {
			if err := ca.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
			acked[n] = true
			ackTimes = append(ackTimes, time.Now())
		}
	}
	moved := time.Now()
	recent := 0
	for _, at := range ackTimes {
		if moved.Sub(at) <= 100*time.Millisecond {
			recent++
		}
	}
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Right before the move: the acknowledgements a has not replicated to b.
	sa := g.subStats("a", topic, sub)
	if sa == nil || !sa.GetReplicated() {
		t.Fatalf("subscription %s in a: stats %v, want a replicated subscription", sub, sa)
	}
	ar := ackRepl(sa, "b")
	if ar == nil {
		t.Fatalf("no ack replication towards b in %v", sa)
	}
	pending := ar.GetPendingAcks()
	t.Logf("%s: at the move, %d of %d acknowledgements not replicated to b (%d ranges, lag %.3fs, connected %v)",
		typ, pending, len(acked), ar.GetPendingRanges(), ar.GetLagSeconds(), ar.GetConnected())

	cb, err := repSubClient(t, g, "b").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(context.Background())
	seen := map[int]bool{}
	dups := 0
	want := count - len(acked)
	for len(seen) < want {
		rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
		m, err := cb.Receive(rctx)
		rcancel()
		if err != nil {
			var missing []int
			for n := range count {
				if !acked[n] && !seen[n] {
					missing = append(missing, n)
				}
			}
			t.Fatalf("%s: lost in b: %d messages not delivered (first %v): %v", typ, len(missing), missing[:min(10, len(missing))], err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if acked[n] {
			dups++
		} else {
			seen[n] = true
		}
		if err := cb.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Anything else delivered now is a duplicate.
	for {
		rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		m, err := cb.Receive(rctx)
		rcancel()
		if err != nil {
			break
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if acked[n] || seen[n] {
			dups++
		}
		_ = cb.Ack(ctx, m.ID)
	}
	t.Logf("%s: moved a -> b: %d delivered in b, 0 lost, %d duplicates (bound: %d acknowledgements not replicated at the move; %d acknowledgements made in the last 100 ms)",
		typ, len(seen), dups, pending, recent)
	if int64(dups) > pending {
		t.Errorf("%s: %d duplicates in b, more than the %d acknowledgements not replicated at the move", typ, dups, pending)
	}
	// b's copy is a replicated subscription too, and everything is consumed.
	waitCond(t, 30*time.Second, "b's subscription has no backlog", func() bool {
		s := g.subStats("b", topic, sub)
		return s != nil && s.GetReplicated() && s.GetBacklogEntries() == 0
	})
	// a's broker exports the ack replication towards b.
	owner := g.ownerIndex("a", topic)
	if owner < 0 {
		t.Fatal("no owner of the topic in a")
	}
	waitCond(t, 30*time.Second, "a's /metrics has the ack replication lag towards b", func() bool {
		resp, err := http.Get("http://" + g.broker("a", owner).HTTPAddr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `meridian_subscription_ack_replication_lag_seconds{remote="b"}`) &&
			strings.Contains(string(body), `meridian_subscription_ack_replication_pending_acks{remote="b"}`)
	})
}

// waitCond polls cond until it holds or timeout passes.
func waitCond(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var repSubTypes = []client.SubscriptionType{client.Exclusive, client.Failover, client.Shared}

// TestReplicatedSubscriptionMove: for each subscription type, a consumer
// moves from a to b and resumes with no loss and duplicates bounded by the
// acknowledgements not yet replicated.
func TestReplicatedSubscriptionMove(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	for _, typ := range repSubTypes {
		t.Run(typ.String(), func(t *testing.T) {
			repSubMove(t, g, repSubNamespace+"/move-"+typ.String(), typ, 100)
		})
	}
}

// TestReplicatedSubscriptionMoveThirdRegionDown: the same with a third
// region of the namespace unreachable throughout (its links cut).
func TestReplicatedSubscriptionMoveThirdRegionDown(t *testing.T) {
	g := startGeo(t, []string{"a", "b", "c"}, geoOptions{})
	g.net.Cut("a", "c", false)
	g.net.Cut("b", "c", false)
	g.createNamespace(repSubNamespace, "a", "b", "c")
	for _, typ := range repSubTypes {
		t.Run(typ.String(), func(t *testing.T) {
			repSubMove(t, g, repSubNamespace+"/down-"+typ.String(), typ, 100)
		})
	}
}

// repSubAdmin returns an admin client of region.
func repSubAdmin(t *testing.T, g *geoCluster, region string) *client.Admin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url(region))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close(context.Background()) })
	return adm
}

// receiveN receives exactly the messages numbered want (in any order) and
// then nothing more for a while; it acknowledges them.
func receiveN(t *testing.T, co *client.Consumer, want []int) {
	t.Helper()
	left := map[int]bool{}
	for _, n := range want {
		left[n] = true
	}
	got := 0
	for {
		timeout := 60 * time.Second
		if len(left) == 0 {
			timeout = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		m, err := co.Receive(ctx)
		cancel()
		if err != nil {
			if len(left) == 0 {
				return
			}
			t.Fatalf("%d of %d messages not delivered (lost): %v", len(left), len(want), err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if !left[n] {
			t.Fatalf("delivered message %d, not one of the %d expected (%d received so far)", n, len(want), got)
		}
		delete(left, n)
		got++
		if err := co.Ack(context.Background(), m.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func nums(from, to int) []int {
	var out []int
	for n := from; n < to; n++ {
		out = append(out, n)
	}
	return out
}

// TestReplicatedSubscriptionResetAllRegions: resetting a replicated
// subscription (admin reset-cursor, by message ID, then to the earliest)
// in one region applies in every region, whatever region it is made in.
func TestReplicatedSubscriptionResetAllRegions(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/reset"
	const count, sub = 40, "rs"
	repSubProduce(t, g, "a", topic, count)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := repSubAdmin(t, g, "a").CreateReplicatedSubscription(ctx, topic, sub, client.Earliest); err != nil {
		t.Fatal(err)
	}
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	var resetID client.MessageID
	for range count {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Properties["n"] == "25" {
			resetID = m.ID
		}
		if err := ca.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	backlogs := func(want int64) {
		t.Helper()
		for _, r := range []string{"a", "b"} {
			waitCond(t, 60*time.Second, fmt.Sprintf("backlog of %s in %s is %d", sub, r, want), func() bool {
				s := g.subStats(r, topic, sub)
				return s != nil && s.GetReplicated() && s.GetBacklogEntries() == want
			})
		}
	}
	backlogs(0)
	// Reset in a to message 25 (a's message ID): in b too, messages 25..39
	// are delivered again, and only they.
	if err := repSubAdmin(t, g, "a").ResetSubscription(ctx, topic, sub, client.ResetPosition{MessageID: &resetID}); err != nil {
		t.Fatal(err)
	}
	backlogs(count - 25)
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Exclusive, Replicated: true}
	cb, err := repSubClient(t, g, "b").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, cb, nums(25, count))
	if err := cb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	backlogs(0)
	// Reset in b to the earliest: a delivers everything again.
	if err := repSubAdmin(t, g, "b").ResetSubscription(ctx, topic, sub, client.ResetPosition{Initial: client.Earliest}); err != nil {
		t.Fatal(err)
	}
	backlogs(count)
	ca2, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ca2.Close(context.Background())
	receiveN(t, ca2, nums(0, count))
}

// TestReplicatedSubscriptionRelay: with the link a-c cut (b reaching
// both), acknowledgements made in a reach c through b (every region ships
// its joined vector), so a consumer moving from a to c gets no duplicate.
func TestReplicatedSubscriptionRelay(t *testing.T) { repSubRelay(t, geoOptions{}) }

// TestReplicatedSubscriptionRelaySecure is TestReplicatedSubscriptionRelay
// with security on (each region authenticated as broker.<region>): b
// relays a's entries and acknowledgements to c, both regions of the set.
func TestReplicatedSubscriptionRelaySecure(t *testing.T) {
	repSubRelay(t, geoOptions{secure: newGeoSecurity(t)})
}

func repSubRelay(t *testing.T, gopts geoOptions) {
	g := startGeo(t, []string{"a", "b", "c"}, gopts)
	g.net.Cut("a", "c", false)
	g.createNamespace(repSubNamespace, "a", "b", "c")
	topic := repSubNamespace + "/relay"
	const count, sub = 60, "rs"
	repSubProduce(t, g, "a", topic, count)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Shared, InitialPosition: client.Earliest, Replicated: true}
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var rest []int
	for range count {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if n%3 == 0 {
			rest = append(rest, n) // left unacknowledged
			continue
		}
		if err := ca.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// c has every entry (relayed by b) and a's acknowledgements (relayed by
	// b): its backlog is what a left.
	waitCond(t, 60*time.Second, "c's subscription has a's acknowledgements (relayed by b)", func() bool {
		s := g.subStats("c", topic, sub)
		return s != nil && s.GetReplicated() && s.GetBacklogEntries() == int64(len(rest))
	})
	if a := ackRepl(g.subStats("a", topic, sub), "c"); a == nil || a.GetConnected() {
		t.Fatalf("a's stream to c: %v, want it not connected (link cut)", a)
	}
	cc, err := repSubClient(t, g, "c").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close(context.Background())
	receiveN(t, cc, rest)
}

// TestReplicatedSubscriptionDelete: deleting a replicated subscription in
// one region deletes it in the others.
func TestReplicatedSubscriptionDelete(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/delete"
	repSubProduce(t, g, "a", topic, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := repSubAdmin(t, g, "a").CreateReplicatedSubscription(ctx, topic, "rs", client.Earliest); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 60*time.Second, "the subscription exists in b", func() bool {
		s := g.subStats("b", topic, "rs")
		return s != nil && s.GetReplicated() && s.GetBacklogEntries() == 5
	})
	if err := repSubAdmin(t, g, "a").DeleteSubscription(ctx, topic, "rs", false); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 60*time.Second, "the subscription is deleted in b", func() bool {
		st, err := g.stats("b", topic)
		if err != nil {
			return false
		}
		for _, s := range st.GetSubscriptions() {
			if s.GetName() == "rs" {
				return false
			}
		}
		return true
	})
}

// TestReplicatedSubscriptionMoveWAN: the move with 40 ms of latency each
// way between the regions, the consumer acknowledging steadily and
// leaving a while its last acknowledgements are still being replicated. With MERIDIAN_LONG set
// (make test-long) it moves 3000 messages per type instead of 300.
func TestReplicatedSubscriptionMoveWAN(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	if err := g.net.SetLatency("a", "b", 40*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	g.createNamespace(repSubNamespace, "a", "b")
	count, types := 300, []client.SubscriptionType{client.Shared}
	if os.Getenv("MERIDIAN_LONG") != "" {
		count, types = 3000, repSubTypes
	}
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			repSubMovePaced(t, g, repSubNamespace+"/wan-"+typ.String(), typ, count, time.Millisecond)
		})
	}
}

// TestReplicatedSubscriptionReceiverCrash: b's broker crashes before it
// persisted the vector it received (its cursors persist only hourly here);
// once it is back, a ships everything again on its new stream, so b's
// subscription recovers a's acknowledgements: a consumer moving to b gets
// exactly the messages a left unacknowledged (no loss, no duplicate).
func TestReplicatedSubscriptionReceiverCrash(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{broker: func(region string, _ int, cfg *broker.Config) {
		if region == "b" {
			cfg.CursorPersistInterval = time.Hour
		}
	}})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/crash"
	const count, sub = 60, "rs"
	repSubProduce(t, g, "a", topic, count)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Failover, InitialPosition: client.Earliest, Replicated: true}
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var rest []int
	for range count {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if n%2 == 1 {
			rest = append(rest, n)
			continue
		}
		if err := ca.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	backlogIn := func(region string, want int) {
		t.Helper()
		waitCond(t, 90*time.Second, fmt.Sprintf("the backlog of %s in %s is %d", sub, region, want), func() bool {
			s := g.subStats(region, topic, sub)
			return s != nil && s.GetReplicated() && s.GetBacklogEntries() == int64(want)
		})
	}
	backlogIn("b", len(rest))
	g.kill("b", 0)
	g.restart("b", 0)
	// Loaded again from a cursor without a's acknowledgements; a's new
	// stream ships them again.
	backlogIn("b", len(rest))
	cb, err := repSubClient(t, g, "b").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(context.Background())
	receiveN(t, cb, rest)
}

// TestReplicatedSubscriptionCreatedInPartition (issue 20 item 2): while
// a-b is cut, a consumes part of a replicated subscription from the
// earliest, and b creates the same subscription at the LATEST position —
// once by a consumer (as a failed-over client does), once by hand (admin)
// for a second subscription. A creation position is never an
// acknowledgement elsewhere: after the heal, a still delivers every
// message its consumer did not acknowledge.
func TestReplicatedSubscriptionCreatedInPartition(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/partition-create"
	const count, part = 200, 80
	repSubProduce(t, g, "a", topic, count)
	waitCond(t, 60*time.Second, "b holds every entry", func() bool {
		st, err := g.stats("b", topic)
		return err == nil && st.GetEntries() >= count
	})
	g.net.Cut("a", "b", false)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cla, clb := repSubClient(t, g, "a"), repSubClient(t, g, "b")
	// In a: both subscriptions from the earliest; the first acknowledges
	// messages 0..part-1, the second acknowledges nothing.
	consumeA := func(sub string, ack int) *client.Consumer {
		co, err := cla.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Failover, InitialPosition: client.Earliest, Replicated: true})
		if err != nil {
			t.Fatal(err)
		}
		for range ack {
			m, err := co.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := co.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
		return co
	}
	ca := consumeA("billing", part)
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cm := consumeA("manual", 0)
	if err := cm.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// In b: billing created at LATEST by a consumer, manual by hand.
	cb, err := clb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "billing", Type: client.Failover, InitialPosition: client.Latest, Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if m, err := cb.Receive(rctx); err == nil {
		t.Fatalf("b's subscription created at latest delivered %v", m.Properties)
	}
	rcancel()
	if err := cb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := repSubAdmin(t, g, "b").CreateReplicatedSubscription(ctx, topic, "manual", client.Latest); err != nil {
		t.Fatal(err)
	}
	g.net.Heal("a", "b")
	for _, sub := range []string{"billing", "manual"} {
		for _, r := range [][2]string{{"a", "b"}, {"b", "a"}} {
			waitCond(t, 90*time.Second, fmt.Sprintf("%s's vector from %s reached %s", sub, r[0], r[1]), func() bool {
				a := ackRepl(g.subStats(r[0], topic, sub), r[1])
				return a != nil && a.GetConnected() && a.GetPendingAcks() == 0 && a.GetLagSeconds() == 0
			})
		}
	}
	for sub, want := range map[string][]int{"billing": nums(part, count), "manual": nums(0, count)} {
		t.Run(sub, func(t *testing.T) {
			co, err := cla.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Failover, InitialPosition: client.Earliest, Replicated: true})
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close(context.Background())
			receiveN(t, co, want)
		})
	}
}

// TestReplicatedSubscriptionBatchIndexAcks (issue 20 item 3): 1000
// messages in two entries (message 0 alone, 1-999 in one batch); a
// consumer in a acknowledges 500 of them one by one (0, and 1-499 by
// batch index); once that is replicated, the subscription moves to b,
// which delivers exactly the 500 others: the batch-index acknowledgements
// replicated with the vector.
func TestReplicatedSubscriptionBatchIndexAcks(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/batch-acks"
	const count, sub = 1000, "rs"
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	p, err := repSubClient(t, g, "a").NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: count,
		BatchingMaxDelay: time.Second, BatchingHoldOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(i int) *client.Message {
		return &client.Message{Payload: fmt.Appendf(nil, "m%d", i), Properties: map[string]string{"n": strconv.Itoa(i)}}
	}
	if _, err := p.Send(ctx, msg(0)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, count)
	for i := 1; i < count; i++ {
		p.SendAsync(ctx, msg(i), func(_ client.MessageID, _ *client.Message, err error) { errs <- err })
	}
	for i := 1; i < count; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	waitCond(t, 60*time.Second, "b holds both entries", func() bool {
		st, err := g.stats("b", topic)
		return err == nil && st.GetEntries() >= 2
	})
	if st, _ := g.stats("a", topic); st.GetEntries() != 2 {
		t.Fatalf("a holds %d entries, want 2 (message 0, then one batch)", st.GetEntries())
	}
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Failover, InitialPosition: client.Earliest, Replicated: true}
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range count {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(m.Properties["n"]); n < count/2 {
			if err := ca.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitCond(t, 60*time.Second, "a's acknowledgements replicated to b", func() bool {
		s := g.subStats("a", topic, sub)
		a := ackRepl(s, "b")
		return s.GetBacklogEntries() == 1 && a != nil && a.GetConnected() && a.GetPendingAcks() == 0 && a.GetLagSeconds() == 0
	})
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cb, err := repSubClient(t, g, "b").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(context.Background())
	receiveN(t, cb, nums(count/2, count))
}
