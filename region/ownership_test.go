package region

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestTopicsSpreadAndMoveOnGracefulStop(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 2})
	addrs := rc.Addrs()
	owners := map[string]string{}
	perBroker := map[string]int{}
	for i := range 10 {
		topic := fmt.Sprintf("public/default/spread-%d", i)
		o := regiontest.LookupOwner(t, addrs[i%2], topic, func(string) bool { return true })
		owners[topic] = o
		perBroker[o]++
	}
	if len(perBroker) != 2 || perBroker[addrs[0]] < 3 || perBroker[addrs[1]] < 3 {
		t.Fatalf("topics not spread over both brokers: %v", perBroker)
	}
	t.Logf("topics per broker: %v", perBroker)
	// Write to every topic, then stop broker 0 gracefully.
	for topic, o := range owners {
		produce(t, dial(t, o), topic, 0, 5)
	}
	// Admin calls sent to a non-owner are forwarded to the owner.
	c, err := grpc.NewClient(addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := clientv1.NewAdminClient(c)
	for topic, o := range owners {
		if o != addrs[0] {
			continue
		}
		st, err := adm.GetTopicStats(context.Background(), &clientv1.GetTopicStatsRequest{Topic: topic})
		if err != nil || st.Entries != 5 {
			t.Fatalf("forwarded stats of %s: %v %v", topic, st, err)
		}
		break
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rc.Broker(0).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for topic, o := range owners {
		if o != addrs[0] {
			continue
		}
		// Released on shutdown: the next lookup moves it at once, no
		// session expiry to wait for.
		regiontest.LookupOwner(t, addrs[1], topic, func(n string) bool { return n == addrs[1] })
		got := consume(t, dial(t, addrs[1]), topic, "s", 5)
		for i := range 5 {
			if got[i] != fmt.Sprintf("m%d", i) {
				t.Fatalf("%s after move: %v", topic, got)
			}
		}
	}
	t.Logf("moved %d topics in %v", perBroker[addrs[0]], time.Since(start))
	brs, err := adm.ListBrokers(context.Background(), &clientv1.ListBrokersRequest{})
	if err != nil || len(brs.Brokers) != 1 {
		t.Fatalf("live brokers after stop: %v %v", brs, err)
	}
}

// TestSessionLossDropsTopics ends a live broker's metadata session from the
// outside (as an expiry after a long pause would): the broker drops its
// topics and registers again, another broker takes them, nothing is lost.
func TestSessionLossDropsTopics(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 2})
	addrs := rc.Addrs()
	topic := "public/default/session-loss"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	produce(t, dial(t, owner), topic, 0, 10)
	ctx := context.Background()
	kv, err := rc.Regional.Get(ctx, "brokers/"+rc.Broker(oi).ID(), metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Regional.CloseSession(ctx, kv.Session); err != nil {
		t.Fatal(err)
	}
	// The old owner notices, drops the topic and registers again.
	deadline := time.Now().Add(30 * time.Second)
	for len(rc.Broker(oi).OwnedTopics()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("broker kept its topics after losing its session")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		kv2, err := rc.Regional.Get(ctx, "brokers/"+rc.Broker(oi).ID(), metadata.ReadOptions{})
		if err == nil && kv2.Session != kv.Session {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("broker did not register again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	newOwner := regiontest.LookupOwner(t, addrs[1-oi], topic, func(string) bool { return true })
	produce(t, dial(t, newOwner), topic, 10, 10)
	got := consume(t, dial(t, newOwner), topic, "s", 20)
	for i := range 20 {
		if got[i] != fmt.Sprintf("m%d", i) {
			t.Fatalf("after session loss: %v", got)
		}
	}
	t.Logf("topic owned by %s after the session loss of %s", newOwner, owner)
}
