package client_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawEntry is one entry sent through a raw produce stream, bypassing the
// client's encoder.
type rawEntry struct {
	compression  clientv1.CompressionType
	uncompressed int64
	payload      []byte
}

// goodEntry is a valid single-message S2 entry holding payload.
func goodEntry(t *testing.T, payload string) rawEntry {
	t.Helper()
	body, size, err := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: []byte(payload)}}}, clientv1.CompressionType_COMPRESSION_TYPE_S2)
	if err != nil {
		t.Fatal(err)
	}
	return rawEntry{clientv1.CompressionType_COMPRESSION_TYPE_S2, size, body}
}

// produceRaw stores entries on topic in order through a raw produce
// stream and returns their IDs.
func produceRaw(t *testing.T, addr, topic string, entries []rawEntry) []*clientv1.MessageId {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := tctx(t, 30*time.Second)
	st, err := clientv1.NewMeridianClient(conn).Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: "raw"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("open producer: %v", err)
	}
	var ids []*clientv1.MessageId
	for i, e := range entries {
		if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i + 1), NumMessages: 1,
			Compression: e.compression, UncompressedSize: e.uncompressed, Payload: e.payload}}}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("receipt %d: %v", i, err)
		}
		rc := r.GetReceipt()
		if rc == nil || rc.GetError() != nil {
			t.Fatalf("send %d refused: %v", i, r)
		}
		ids = append(ids, rc.GetMessageId())
	}
	return ids
}

// waitPoison polls the subscription's stats until its backlog is empty
// and its poison counts are want.
func waitPoison(t *testing.T, a *client.Admin, topic, sub string, want map[string]int64, dead int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *clientv1.SubscriptionStats
	for time.Now().Before(deadline) {
		st, err := a.TopicStats(tctx(t, 10*time.Second), topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.GetSubscriptions() {
			if s.GetName() != sub {
				continue
			}
			last = s
			ok := s.GetBacklogEntries() == 0 && len(s.GetPoisonEntries()) == len(want) && s.GetDeadLetteredMessages() == dead
			for k, v := range want {
				ok = ok && s.GetPoisonEntries()[k] == v
			}
			if ok {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("subscription %s: want empty backlog, poison %v, dead-lettered %d; last stats %v", sub, want, dead, last)
}

// TestPoisonEntriesNeverStallASubscription: entries the consumer cannot
// decode (an S2 batch of garbage, a zstd frame of garbage, an
// uncompressed batch of garbage) between good ones. Before, the consumer logged "dropping
// undecodable entry" and never acknowledged them: the subscription's
// backlog never drained. Now each is acknowledged with its reason and
// counted in topics stats; the good messages are received once each.
func TestPoisonEntriesNeverStallASubscription(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const topic = "public/default/poison"
	ctx := tctx(t, 60*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{0xff, 0x13, 0x00, 0x7a}, 64)
	produceRaw(t, sa.GRPCAddr(), topic, []rawEntry{
		goodEntry(t, "m0"),
		{clientv1.CompressionType_COMPRESSION_TYPE_S2, 100, garbage},
		{clientv1.CompressionType_COMPRESSION_TYPE_ZSTD, 100, garbage},
		goodEntry(t, "m1"),
		{clientv1.CompressionType_COMPRESSION_TYPE_NONE, int64(len(garbage)), garbage},
		goodEntry(t, "m2"),
	})
	got := receiveN(t, co, 3, 30*time.Second, true)
	if p := strings.Join(payloads(got), ","); p != "m0,m1,m2" {
		t.Fatalf("received %s, want m0,m1,m2", p)
	}
	expectNothing(t, co, 300*time.Millisecond)
	waitPoison(t, a, topic, "s", map[string]int64{"corrupt": 3}, 0)
	t.Logf("3 good messages received once each (0 duplicates), 3 poison entries acknowledged with their reasons")
}

// TestPoisonEntryGoesToTheDeadLetterTopic: with a DeadLetterPolicy the
// undecodable entry's raw bytes are written to the dead-letter topic with
// its reason, then acknowledged (dead-lettered and counted as poison).
// An entry over the consumer's MaxEntryBytes is a poison pill too.
func TestPoisonEntryGoesToTheDeadLetterTopic(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const topic = "public/default/poison-dlq"
	ctx := tctx(t, 60*time.Second)
	dlq, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic + "-s-DLQ", Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest,
		MaxEntryBytes: 1024, DeadLetter: &client.DeadLetterPolicy{MaxRedeliveries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{0xfe, 0x01}, 50)
	big := goodEntry(t, strings.Repeat("x", 4096)) // decodes to more than 1 KiB
	ids := produceRaw(t, sa.GRPCAddr(), topic, []rawEntry{
		{clientv1.CompressionType_COMPRESSION_TYPE_S2, 64, garbage},
		big,
		goodEntry(t, "ok"),
	})
	got := receiveN(t, co, 1, 30*time.Second, true)
	if string(got[0].Payload) != "ok" {
		t.Fatalf("received %q, want ok", got[0].Payload)
	}
	letters := receiveN(t, dlq, 2, 30*time.Second, true)
	want := []struct {
		reason string
		raw    []byte
		id     *clientv1.MessageId
	}{{"corrupt", garbage, ids[0]}, {"too_large", big.payload, ids[1]}}
	for i, w := range want {
		m := letters[i]
		if m.Properties[client.PropertyPoisonReason] != w.reason || !bytes.Equal(m.Payload, w.raw) ||
			m.Properties[client.PropertyRealTopic] != topic || m.Properties[client.PropertySubscription] != "s" ||
			m.Properties[client.PropertyOriginMessageID] != (client.MessageID{LedgerID: w.id.GetLedgerId(), EntryID: w.id.GetEntryId()}).String() {
			t.Fatalf("dead letter %d: properties %v, %d bytes; want reason %s, the entry's %d raw bytes", i, m.Properties, len(m.Payload), w.reason, len(w.raw))
		}
	}
	waitPoison(t, a, topic, "s", map[string]int64{"corrupt": 1, "too_large": 1}, 2)
}

// TestPoisonSchemaMismatch: with PoisonSchemaMismatch a typed consumer
// does not return a message its schema cannot decode; it writes it to the
// dead-letter topic with POISON_REASON "schema", acknowledges it, and
// Receive returns the next good value.
func TestPoisonSchemaMismatch(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 60*time.Second)
	const topic = "public/default/poison-schema"
	s1, _ := client.JSONSchema[userV1]()
	dlq, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic + "-s-DLQ", Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	co, err := client.SubscribeTyped(ctx, c, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest,
		PoisonSchemaMismatch: true, DeadLetter: &client.DeadLetterPolicy{MaxRedeliveries: 3}}, s1)
	if err != nil {
		t.Fatal(err)
	}
	adm, _ := c.Admin()
	p1, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, s1)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.SetSchemaCompatibility(ctx, topic, false, clientv1.SchemaCompatibility_SCHEMA_COMPATIBILITY_NONE); err != nil {
		t.Fatal(err)
	}
	ps, err := client.NewTypedProducer(ctx, c, client.ProducerOptions{Topic: topic}, client.StringSchema())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Send(ctx, "not json", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Send(ctx, userV1{"ann", 30}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := co.Receive(ctx)
	if err != nil || m.Value != (userV1{"ann", 30}) {
		t.Fatalf("Receive: %+v, %v; want ann (the STRING message dead-lettered)", m, err)
	}
	_ = co.Ack(ctx, m.ID)
	l := receiveN(t, dlq, 1, 30*time.Second, true)[0]
	if l.Properties[client.PropertyPoisonReason] != "schema" || string(l.Payload) != "not json" {
		t.Fatalf("dead letter %q with %v; want the STRING message with POISON_REASON schema", l.Payload, l.Properties)
	}
}
