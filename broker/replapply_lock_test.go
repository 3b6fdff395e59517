package broker_test

import (
	"context"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
)

// replIdentEntry is replEntryBytes with a failover identity on the
// producer, so that a queued local copy of the batch makes it wait.
func replIdentEntry(t *testing.T, origin string, seq int64, ident string) []byte {
	t.Helper()
	md, payload, err := wire.DecodeEntry(replEntryBytes(t, origin, seq))
	if err != nil {
		t.Fatal(err)
	}
	md.ProducerIdentity = ident
	data, err := wire.EncodeEntry(md, payload)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestReplicateBlockedStreamDoesNotBlockOtherOrigins: a stream whose entry
// waits for a queued local copy of its batch (the dedup wait of
// DedupReplicatedCopies, up to 10 s) holds up only its own origin: another
// origin's stream of the same topic is answered meanwhile. Before, the
// per-topic receive lock was held across that wait, and every stream of the
// topic queued behind it (as behind a held append or a slow bookie read of
// the age quota). Once the local copy fails, the waiting entry is stored:
// nothing lost, each origin in order.
func TestReplicateBlockedStreamDoesNotBlockOtherOrigins(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.DedupReplicatedCopies = true })
	ctx := context.Background()
	topic := "public/default/repl-lock"
	createTopicWithSub(t, ctx, adm, topic, "check")
	addr := rc.Addrs()[0]
	sa, _ := mustOpenRepl(t, addr, topic, "a", "test")
	sc, _ := mustOpenRepl(t, addr, topic, "c", "test")
	wantResults(t, "c first", sc.roundTrip(replRange(t, "c", 1, 2)), rP, rP)

	// A local send of producer p-a under identity "fid" is in flight here.
	release, ok := broker.HoldIdentForTesting(rc.Broker(0), topic, "fid", "p-a", 1, 1)
	if !ok {
		t.Fatal("topic not loaded")
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	if _, err := sa.send([][]byte{replIdentEntry(t, "a", 1, "fid")}); err != nil {
		t.Fatal(err)
	}
	aAck := make(chan *clientv1.ReplicateAck, 1)
	go func() {
		a, err := sa.ack()
		if err != nil {
			t.Errorf("a's ack: %v", err)
		}
		aAck <- a
	}()
	waitFor(t, "a's entry waiting for the local copy", func() bool {
		return broker.ReplWaitingForTesting(rc.Broker(0), topic) == 1
	})
	id, err := sc.send(replRange(t, "c", 3, 4))
	if err != nil {
		t.Fatal(err)
	}
	cAck, err := sc.ack()
	if err != nil || cAck.GetRequestId() != id {
		t.Fatalf("c's ack: %v %v", cAck, err)
	}
	wantResults(t, "c while a waits", cAck, rP, rP)
	select {
	case a := <-aAck:
		t.Fatalf("a answered (%v, %v) before c: c's stream waited for a's dedup wait", a.GetResults(), a.GetError())
	default:
	}
	// The local copy fails: a's entry is stored.
	release()
	released = true
	a := <-aAck
	wantResults(t, "a after the local copy resolved", a, rP)
	checkOrigins(t, readAll(t, cli, adm, topic, "check", 5), map[string]int64{"a": 1, "c": 4})
}
