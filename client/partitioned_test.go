package client_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
)

// keyedMsg is "key:index" in a payload.
func keyedPayload(key string, i int) []byte { return fmt.Appendf(nil, "%s:%d", key, i) }

func parseKeyed(t *testing.T, b []byte) (string, int) {
	t.Helper()
	k, v, ok := strings.Cut(string(b), ":")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		t.Fatalf("payload %q", b)
	}
	return k, n
}

// orderChecker asserts that each key's messages arrive in send order
// (accounting for none lost) and on the partition its hash names.
type orderChecker struct {
	t     *testing.T
	n     int // partitions
	next  map[string]int
	parts map[int32]int // messages per partition
	dups  int
	// lastKeyless is the last keyless index seen per partition.
	lastKeyless map[int32]int
}

func newOrderChecker(t *testing.T, n int) *orderChecker {
	return &orderChecker{t: t, n: n, next: map[string]int{}, parts: map[int32]int{}, lastKeyless: map[int32]int{}}
}

func (oc *orderChecker) observe(m *client.ReceivedMessage) {
	oc.t.Helper()
	key, i := parseKeyed(oc.t, m.Payload)
	oc.parts[m.ID.Partition]++
	if m.Key != "" {
		if want := int32(wire.KeyPartition(m.Key, oc.n)); m.ID.Partition != want {
			oc.t.Fatalf("key %q on partition %d, want %d", m.Key, m.ID.Partition, want)
		}
	}
	if m.Key == "" {
		// Keyless messages are ordered within a partition only.
		last, ok := oc.lastKeyless[m.ID.Partition]
		switch {
		case ok && i <= last:
			oc.dups++
		default:
			oc.lastKeyless[m.ID.Partition] = i
			oc.next[key]++
		}
		return
	}
	switch {
	case i == oc.next[key]:
		oc.next[key]++
	case i < oc.next[key]:
		oc.dups++ // a redelivery after a reconnect: at least once
	default:
		oc.t.Fatalf("key %q: got index %d, want %d (out of order or lost)", key, i, oc.next[key])
	}
}

// TestPartitionedKeyOrderRoundRobinStats: on a 4-partition topic, keyed
// messages land on their hash's partition and arrive in per-key order
// through the merged consumer; keyless synchronous sends go round-robin
// (exactly even); the aggregated stats sum the partitions and the
// subscription's backlog drains to 0 once everything is acknowledged.
func TestPartitionedKeyOrderRoundRobinStats(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 90*time.Second)
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const parts = 4
	topic := "public/default/orders"
	if err := adm.CreatePartitionedTopic(ctx, topic, parts); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Partitions(ctx, topic); err != nil || n != parts {
		t.Fatalf("partitions %d %v", n, err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close(ctx)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, BatchingMaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)

	// Keyed, asynchronous: 8 keys x 50.
	const keys, perKey = 8, 50
	var mu sync.Mutex
	var sendErr error
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			p.SendAsync(ctx, &client.Message{Key: key, Payload: keyedPayload(key, i)}, func(id client.MessageID, m *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err == nil && id.Partition != int32(wire.KeyPartition(m.Key, parts)) {
					err = fmt.Errorf("key %q acked on partition %d", m.Key, id.Partition)
				}
				if err != nil && sendErr == nil {
					sendErr = err
				}
			})
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	mu.Unlock()
	// Keyless, synchronous: each send is a batch of its own, round-robin.
	const keyless = 40
	perPart := map[int32]int{}
	for i := range keyless {
		id, err := p.Send(ctx, &client.Message{Payload: keyedPayload("", i)})
		if err != nil {
			t.Fatal(err)
		}
		perPart[id.Partition]++
	}
	for i := range parts {
		if perPart[int32(i)] != keyless/parts {
			t.Fatalf("keyless spread %v: want %d on each of %d partitions", perPart, keyless/parts, parts)
		}
	}

	// Aggregated stats before consuming: counters add up, the
	// subscription merges, per-partition stats are listed.
	total := int64(keys*perKey + keyless)
	st, err := adm.PartitionedTopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPartitions() != parts || len(st.GetPartitionStats()) != parts || st.GetMsgsInTotal() != total {
		t.Fatalf("stats: partitions %d, per-partition %d, msgs in %d (want %d)", st.GetPartitions(), len(st.GetPartitionStats()), st.GetMsgsInTotal(), total)
	}
	var sumIn, sumBacklog int64
	for _, ps := range st.GetPartitionStats() {
		sumIn += ps.GetMsgsInTotal()
		for _, ss := range ps.GetSubscriptions() {
			sumBacklog += ss.GetBacklogEntries()
		}
	}
	if sumIn != total || len(st.GetSubscriptions()) != 1 || st.GetSubscriptions()[0].GetName() != "s" ||
		st.GetSubscriptions()[0].GetBacklogEntries() != sumBacklog || sumBacklog == 0 {
		t.Fatalf("aggregate: in %d/%d, subs %v, backlog %d vs sum %d", sumIn, total, st.GetSubscriptions(), st.GetSubscriptions()[0].GetBacklogEntries(), sumBacklog)
	}
	if plain, err := adm.TopicStats(ctx, topic); err != nil || plain.GetPartitions() != parts || len(plain.GetPartitionStats()) != 0 || plain.GetMsgsInTotal() != total {
		t.Fatalf("stats on the base name: %v %v", plain, err)
	}

	// Merged consumption: per-key order, keys on their partition.
	oc := newOrderChecker(t, parts)
	got := 0
	for got < int(total) {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d/%d: %v", got, total, err)
		}
		oc.observe(m)
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatalf("ack %v (partition %d): %v", m.ID, m.ID.Partition, err)
		}
		got++
	}
	for k := range keys {
		if key := fmt.Sprintf("key-%d", k); oc.next[key] != perKey {
			t.Fatalf("key %s: %d of %d", key, oc.next[key], perKey)
		}
	}
	if oc.next[""] != keyless {
		t.Fatalf("keyless: %d of %d", oc.next[""], keyless)
	}
	t.Logf("per partition %v, duplicates %d", oc.parts, oc.dups)
	// Everything acknowledged: the merged backlog drains.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := adm.TopicStats(ctx, topic)
		if err == nil && len(st.GetSubscriptions()) == 1 && st.GetSubscriptions()[0].GetBacklogEntries() == 0 && st.GetBacklogEntries() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog did not drain: %v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// An ID naming no partition is refused.
	if err := co.Ack(ctx, client.MessageID{Partition: parts}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("ack on partition %d: %v", parts, err)
	}
}

// TestPartitionedRaiseLowerDelete: a raise is picked up by a live
// producer and consumer within the discovery interval, and messages the
// producer wrote to a new partition before the consumer saw it are not
// lost; lowering (or
// keeping) the count is refused naming the current count and changes
// nothing; bad counts and names are refused; delete refuses connected
// partitions without force and then removes everything.
func TestPartitionedRaiseLowerDelete(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 90*time.Second)
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	topic := "public/default/grow"
	if err := adm.CreatePartitionedTopic(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	if err := adm.CreatePartitionedTopic(ctx, topic, 3); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	for _, n := range []int{0, -1, broker.MaxPartitions + 1} {
		if err := adm.CreatePartitionedTopic(ctx, "public/default/bad", n); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "partitions") {
			t.Fatalf("create with %d partitions: %v", n, err)
		}
	}
	if err := adm.CreatePartitionedTopic(ctx, "public/default/x-partition-1", 2); !errors.Is(err, client.ErrInvalidName) || !strings.Contains(err.Error(), "names a partition") {
		t.Fatalf("create a partition's name: %v", err)
	}
	// The base name is not a topic of its own.
	if err := adm.CreateTopic(ctx, topic); !errors.Is(err, client.ErrNotAllowed) || !strings.Contains(err.Error(), "partitioned") {
		t.Fatalf("create the base name as a plain topic: %v", err)
	}
	// A namespace with a partitioned topic cannot be deleted.
	if err := adm.CreateNamespace(ctx, "public/pns", nil); err != nil {
		t.Fatal(err)
	}
	if err := adm.CreatePartitionedTopic(ctx, "public/pns/t", 2); err != nil {
		t.Fatal(err)
	}
	if err := adm.DeleteNamespace(ctx, "public/pns"); !errors.Is(err, client.ErrNotAllowed) || !strings.Contains(err.Error(), "public/pns/t") {
		t.Fatalf("delete a namespace with a partitioned topic: %v", err)
	}
	if ls, err := adm.ListPartitionedTopics(ctx, "public/pns"); err != nil || len(ls) != 1 || ls[0].GetTopic() != "public/pns/t" || ls[0].GetPartitions() != 2 {
		t.Fatalf("list: %v %v", ls, err)
	}
	if _, err := adm.DeletePartitionedTopic(ctx, "public/pns/t", false); err != nil {
		t.Fatal(err)
	}
	if err := adm.DeleteNamespace(ctx, "public/pns"); err != nil {
		t.Fatalf("delete the emptied namespace: %v", err)
	}

	// The consumer starts at Latest and discovers partitions more slowly
	// than the producer: the producer writes to the new partitions before
	// the consumer subscribes them, which it does from the earliest
	// message, so nothing is lost.
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", PartitionsAutoDiscoveryInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close(ctx)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, PartitionsAutoDiscoveryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, PartitionsAutoDiscoveryInterval: time.Millisecond}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "PartitionsAutoDiscoveryInterval") {
		t.Fatalf("tiny discovery interval: %v", err)
	}

	for _, n := range []int{1, 2} {
		err := adm.UpdatePartitionedTopic(ctx, topic, n)
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "current count is 2") {
			t.Fatalf("update to %d: %v", n, err)
		}
	}
	if md, err := adm.PartitionedTopicMetadata(ctx, topic); err != nil || md.GetPartitions() != 2 {
		t.Fatalf("after refused updates: %v %v", md, err)
	}
	if err := adm.UpdatePartitionedTopic(ctx, "public/default/plain", 4); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("update a plain topic: %v", err)
	}

	if err := adm.UpdatePartitionedTopic(ctx, topic, 4); err != nil {
		t.Fatal(err)
	}
	// The producer routes to the new partitions once it has seen them.
	sent := 0
	seen := map[int32]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for !seen[2] || !seen[3] {
		id, err := p.Send(ctx, &client.Message{Payload: keyedPayload("", sent)})
		if err != nil {
			t.Fatal(err)
		}
		sent++
		seen[id.Partition] = true
		if time.Now().After(deadline) {
			t.Fatalf("producer never used partitions 2 and 3 (saw %v after %d sends)", seen, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The consumer receives from every partition, nothing lost.
	oc := newOrderChecker(t, 4)
	for n := 0; n < sent; n++ {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d/%d: %v (per partition %v)", n, sent, err, oc.parts)
		}
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		oc.observe(m)
	}
	if oc.parts[2] == 0 || oc.parts[3] == 0 || oc.next[""] != sent {
		t.Fatalf("received per partition %v, %d of %d", oc.parts, oc.next[""], sent)
	}
	t.Logf("%d messages, per partition %v, duplicates %d", sent, oc.parts, oc.dups)

	// Delete: refused while connected, then everything goes.
	if _, err := adm.DeletePartitionedTopic(ctx, topic, false); err == nil {
		t.Fatal("delete with a producer and a consumer connected succeeded")
	}
	if md, err := adm.PartitionedTopicMetadata(ctx, topic); err != nil || md.GetPartitions() != 4 {
		t.Fatalf("after refused delete: %v %v", md, err)
	}
	_ = p.Close(ctx)
	_ = co.Close(ctx)
	n, err := adm.DeletePartitionedTopic(ctx, topic, true)
	if err != nil || n != 4 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if md, err := adm.PartitionedTopicMetadata(ctx, topic); err != nil || md.GetPartitions() != 0 {
		t.Fatalf("after delete: %v %v", md, err)
	}
}

// TestPartitionedReplicated: a partitioned topic of a namespace
// replicated between regions a and b: the partition count created in a
// is seen in b, and keyed messages produced in a reach a consumer in b on
// the same partitions (replicated partition by partition), in per-key
// order.
func TestPartitionedReplicated(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Bookies: 1,
		Broker: func(_ string, _ int, cfg *broker.Config) {
			cfg.Replication.CheckInterval = 300 * time.Millisecond
			cfg.Replication.KeeperInterval = time.Second
		}})
	ca := newClient(t, m.Region("a").Addrs()[0])
	cb := newClient(t, m.Region("b").Addrs()[0])
	ctx := tctx(t, 120*time.Second)
	admA, err := ca.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admB, err := cb.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := admA.SetNamespaceReplication(ctx, broker.DefaultNamespace, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	const parts = 3
	topic := "public/default/geo-orders"
	if err := admA.CreatePartitionedTopic(ctx, topic, parts); err != nil {
		t.Fatal(err)
	}
	// The record is global: b sees it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := admB.PartitionedTopicMetadata(ctx, topic)
		if err == nil && md.GetPartitions() == parts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never saw %d partitions: %v %v", parts, md, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const every = 200 * time.Millisecond
	co, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest, PartitionsAutoDiscoveryInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close(ctx)
	p, err := ca.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxDelay: 5 * time.Millisecond, PartitionsAutoDiscoveryInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	const keys, perKey = 6, 20
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			p.SendAsync(ctx, &client.Message{Key: key, Payload: keyedPayload(key, i)}, func(_ client.MessageID, _ *client.Message, err error) {
				if err != nil {
					t.Errorf("send: %v", err)
				}
			})
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	oc := newOrderChecker(t, parts)
	for n := 0; n < keys*perKey; n++ {
		msg, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive in b %d/%d: %v (per partition %v)", n, keys*perKey, err, oc.parts)
		}
		if msg.OriginRegion != "a" {
			t.Fatalf("origin %q, want a", msg.OriginRegion)
		}
		oc.observe(msg)
		if err := co.Ack(ctx, msg.ID); err != nil {
			t.Fatal(err)
		}
	}
	for k := range keys {
		if key := fmt.Sprintf("k%d", k); oc.next[key] != perKey {
			t.Fatalf("key %s: %d of %d in b", key, oc.next[key], perKey)
		}
	}
	t.Logf("b received per partition %v, duplicates %d", oc.parts, oc.dups)
	// b's aggregated stats see the partitions' replicated messages.
	st, err := admB.PartitionedTopicStats(ctx, topic)
	if err != nil || st.GetPartitions() != parts || st.GetMissingPartitions() != 0 || st.GetMsgsInTotal() < keys*perKey {
		t.Fatalf("b stats: %v %v", st, err)
	}
	if err := admB.UpdatePartitionedTopic(ctx, topic, parts-1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("lowering from b: %v", err)
	}

	// A raise made in b reaches the producer in a and the consumer in b:
	// keyless messages on the new partition are produced in a and
	// received in b.
	if err := admB.UpdatePartitionedTopic(ctx, topic, parts+1); err != nil {
		t.Fatal(err)
	}
	sent := 0
	deadline = time.Now().Add(60 * time.Second)
	for {
		id, err := p.Send(ctx, &client.Message{Payload: keyedPayload("", sent)})
		if err != nil {
			t.Fatal(err)
		}
		sent++
		if id.Partition == parts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("producer in a never used partition %d after the raise (%d sends)", parts, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	oc2 := newOrderChecker(t, parts+1)
	for oc2.next[""] < sent {
		msg, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive in b after the raise %d/%d: %v (per partition %v)", oc2.next[""], sent, err, oc2.parts)
		}
		oc2.observe(msg)
		if err := co.Ack(ctx, msg.ID); err != nil {
			t.Fatal(err)
		}
	}
	if oc2.parts[parts] == 0 {
		t.Fatalf("b received nothing from the new partition: %v", oc2.parts)
	}
	t.Logf("after the raise: %d keyless messages, b per partition %v, duplicates %d", sent, oc2.parts, oc2.dups)
}

// TestPartitionedSeekAndReader: a partitioned consumer seeks every
// partition to a time, and nothing from before that time arrives after
// Seek returns (not even a message a partition's pump already held); a
// seek to a message ID is refused (it names one partition); a reader on
// the partitioned name reads every partition from a time.
func TestPartitionedSeekAndReader(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 90*time.Second)
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const parts = 3
	topic := "public/default/seek"
	if err := adm.CreatePartitionedTopic(ctx, topic, parts); err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest, ReceiverQueueSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close(ctx)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	send := func(prefix string, n int) {
		for i := range n {
			key := fmt.Sprintf("%s%d", prefix, i%6)
			if _, err := p.Send(ctx, &client.Message{Key: key, Payload: keyedPayload(key, i/6)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("old", 60)
	// Publish times have millisecond precision: start "new" clearly later.
	time.Sleep(20 * time.Millisecond)
	at := time.Now()
	time.Sleep(20 * time.Millisecond)
	send("new", 60)
	// Receive a few old ones (pumps and queues are full of old messages).
	for range 5 {
		if _, err := co.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := co.Seek(ctx, client.StartAtMessageID(client.MessageID{LedgerID: 1})); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("seek to a message ID: %v", err)
	}
	if err := co.Seek(ctx, client.StartAtTime(at)); err != nil {
		t.Fatal(err)
	}
	oc := newOrderChecker(t, parts)
	for n := 0; n < 60; n++ {
		m, err := co.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after seek %d/60: %v", n, err)
		}
		if strings.HasPrefix(m.Key, "old") {
			t.Fatalf("message %q from before the seek time after Seek returned", m.Payload)
		}
		oc.observe(m)
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("after seek: per partition %v, duplicates %d", oc.parts, oc.dups)

	r, err := c.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartAtTime(at)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	rc := newOrderChecker(t, parts)
	for n := 0; n < 60; n++ {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader %d/60: %v", n, err)
		}
		if strings.HasPrefix(m.Key, "old") {
			t.Fatalf("reader from %v read %q", at, m.Payload)
		}
		rc.observe(m)
	}
	if _, err := c.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartAtMessageID(client.MessageID{LedgerID: 1})}); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("reader from a message ID: %v", err)
	}
}
