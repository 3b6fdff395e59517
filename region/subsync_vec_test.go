package region_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
)

// Ack vectors: no holes for entries not for a region, deltas (issue 20
// item 6).

// produceKept sends count messages n = 0..count-1 (one per entry, property
// o = region) to topic in region; those with n%3 == 1 are kept in region:
// disable_replication when n%6 == 1, replicate_to [region] when n%6 == 4.
func produceKept(t *testing.T, g *geoCluster, region, topic string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := repSubClient(t, g, region).NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	for n := range count {
		m := &client.Message{Payload: fmt.Appendf(nil, "%s%d", region, n), Properties: map[string]string{"n": strconv.Itoa(n), "o": region}}
		switch n % 6 {
		case 1:
			m.DisableReplication = true
		case 4:
			m.ReplicateTo = []string{region}
		}
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatalf("send %d: %v", n, err)
		}
	}
}

// cursorOf returns the internal stats of sub's cursor on topic in region
// (nil while unknown).
func (g *geoCluster) cursorOf(region, topic, sub string) *clientv1.CursorInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url(region))
	if err != nil {
		return nil
	}
	defer adm.Close(ctx)
	st, err := adm.TopicInternalStats(ctx, topic)
	if err != nil {
		return nil
	}
	for _, c := range st.GetCursors() {
		if c.GetName() == sub {
			return c
		}
	}
	return nil
}

// sentBytes sums meridian_subscription_ack_replication_sent_bytes_total
// on a region's broker.
func sentBytes(t *testing.T, srv *broker.Server) float64 {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "meridian_subscription_ack_replication_sent_bytes_total{") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// TestReplicatedSubscriptionNoHolesForEntriesNotForRegion (issue 20 item
// 6): a and b each produce 300 messages, a third of them kept in their
// region (disable_replication or replicate_to the region alone). A
// consumer in b acknowledges everything b holds; then a consumer in a
// receives exactly a's 100 kept messages and acknowledges half of them.
// b's vector then holds no hole for the messages never sent to b — none
// for a's kept messages, acknowledged in a or not — and its cursor
// persists with it; a keeps the 50 messages nobody acknowledged (its own
// backlog, never skipped); and with no new acknowledgement nothing more is
// shipped.
func TestReplicatedSubscriptionNoHolesForEntriesNotForRegion(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{broker: func(_ string, _ int, c *broker.Config) {
		c.Subscriptions.FullSyncInterval = time.Hour // no periodic whole vector in the steady-state check
	}})
	g.createNamespace(repSubNamespace, "a", "b")
	topic := repSubNamespace + "/not-for-b"
	const count, sub = 300, "rs"
	produceKept(t, g, "a", topic, count)
	produceKept(t, g, "b", topic, count)
	for _, r := range []string{"a", "b"} {
		waitCond(t, 60*time.Second, r+" holds its 300 and the other region's 200", func() bool {
			st, err := g.stats(r, topic)
			return err == nil && st.GetEntries() == count+count*2/3
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	opts := client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Shared, InitialPosition: client.Earliest, Replicated: true}
	cb, err := repSubClient(t, g, "b").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range count + count*2/3 {
		m, err := cb.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := cb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 60*time.Second, "b's acknowledgements applied in a: only a's 100 kept messages left", func() bool {
		s := g.subStats("a", topic, sub)
		a := ackRepl(g.subStats("b", topic, sub), "a")
		return s.GetBacklogEntries() == count/3 && a != nil && a.GetPendingAcks() == 0
	})
	ca, err := repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range count / 3 {
		m, err := ca.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m.Properties["n"])
		if m.Properties["o"] != "a" || n%3 != 1 {
			t.Fatalf("a delivered %s%d, acknowledged in b", m.Properties["o"], n)
		}
		if n%6 == 1 {
			if err := ca.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ca.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 60*time.Second, "a's acknowledgements replicated to b", func() bool {
		s := g.subStats("a", topic, sub)
		a := ackRepl(s, "b")
		return s.GetBacklogEntries() == count/6 && a != nil && a.GetPendingAcks() == 0 && a.GetLagSeconds() == 0
	})
	var last *clientv1.CursorInfo
	check := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			last = g.cursorOf("b", topic, sub)
			s := g.subStats("b", topic, sub)
			if last != nil && last.GetAckVectorRanges() == 0 && s.GetBacklogEntries() == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s: vector %d ranges (%d bytes), backlog %d",
					what, last.GetAckVectorRanges(), last.GetAckVectorBytes(), s.GetBacklogEntries())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("b's vector without holes and b's backlog empty")
	t.Logf("b: vector %d ranges, %d bytes", last.GetAckVectorRanges(), last.GetAckVectorBytes())
	ac := g.cursorOf("a", topic, sub)
	t.Logf("a: vector %d ranges, %d bytes", ac.GetAckVectorRanges(), ac.GetAckVectorBytes())
	if ac.GetAckVectorRanges() > count/6 {
		t.Fatalf("a's vector has %d ranges: want at most one per message of a acknowledged nowhere (%d)", ac.GetAckVectorRanges(), count/6)
	}
	// Steady state: no acknowledgement, nothing shipped (keepalives carry no
	// updates).
	before := sentBytes(t, g.broker("a", 0)) + sentBytes(t, g.broker("b", 0))
	time.Sleep(3 * time.Second)
	if after := sentBytes(t, g.broker("a", 0)) + sentBytes(t, g.broker("b", 0)); after != before {
		t.Fatalf("%v bytes of updates shipped in 3 s without an acknowledgement", after-before)
	}
	t.Logf("updates shipped in all: %v bytes", before)
	// The cursor persists it (an unload persists and closes; the next load
	// reads the record).
	if err := g.m.Region("b").Unload(g.ownerIndex("b", topic), topic); err != nil {
		t.Fatal(err)
	}
	check("b's vector without holes after an unload (as persisted)")
	// a still delivers exactly its 50 messages acknowledged nowhere.
	ca, err = repSubClient(t, g, "a").Subscribe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(context.Background())
	var want []int
	for n := 4; n < count; n += 6 {
		want = append(want, n)
	}
	receiveN(t, ca, want)
}
