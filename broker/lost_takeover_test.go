package broker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestLostEntryDoesNotBlockTakeover loses one entry of a topic's open
// ledger on every bookie, then crashes the owner. The other broker must
// still load the topic: its takeover scan (dedup state, ledger size) skips
// the lost entry instead of failing the load. Producers work again, and a
// subscription gets every acknowledged message but the lost one, after it
// stopped visibly at the lost entry and an operator skipped it.
func TestLostEntryDoesNotBlockTakeover(t *testing.T) {
	logs := &countingLog{t: t}
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3, Broker: func(_ int, c *broker.Config) {
		c.TailCacheBytes = 0 // every read goes to the bookies
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	topic := "public/default/lost-takeover"
	_, adm := conn(t, rc.Addrs()[0])
	createTopicWithSub(t, ctx, adm, topic, "s")
	lr, err := func() (*clientv1.LookupResponse, error) {
		cli, _ := conn(t, rc.Addrs()[0])
		return cli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
	}()
	if err != nil {
		t.Fatal(err)
	}
	owner := 0
	if lr.GetBrokerUrl() == rc.Addrs()[1] {
		owner = 1
	}
	ocli, _ := conn(t, rc.Addrs()[owner])
	p, _ := openProducer(t, ocli, topic, "p")
	const n, lost = 40, 17
	acked := map[string]*clientv1.MessageId{}
	var lostPayload []byte
	var lostID *clientv1.MessageId
	for i := range n {
		payload := make([]byte, 512)
		_, _ = rand.Read(payload)
		body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: payload}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
		if err := p.st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i), NumMessages: 1,
			Compression: clientv1.CompressionType_COMPRESSION_TYPE_NONE, UncompressedSize: size, Payload: body}}}); err != nil {
			t.Fatal(err)
		}
		r, err := p.st.Recv()
		if err != nil || r.GetReceipt().GetError() != nil {
			t.Fatalf("send %d: %v %v", i, err, r.GetReceipt().GetError())
		}
		if i == lost {
			lostPayload, lostID = payload, r.GetReceipt().GetMessageId()
			continue
		}
		acked[string(payload)] = r.GetReceipt().GetMessageId()
	}
	copies, err := rc.Bookies.LoseEntry(ctx, lostID.GetLedgerId(), lostID.GetEntryId(), lostPayload)
	if err != nil {
		t.Fatal(err)
	}
	if copies < 2 {
		t.Fatalf("damaged %d copies of entry %d, want every replica (>= 2)", copies, lost)
	}
	t.Logf("lost entry %d:%d (%d copies damaged); crashing owner %d", lostID.GetLedgerId(), lostID.GetEntryId(), copies, owner)
	rc.Kill(owner)
	survivor := 1 - owner

	// The survivor loads the topic: a producer opens and stores new messages.
	scli, _ := conn(t, rc.Addrs()[survivor])
	var lastErr error
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := scli.Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
		if err == nil && r.GetBrokerUrl() == rc.Addrs()[survivor] {
			break
		}
		if err == nil {
			err = fmt.Errorf("lookup answers %s", r.GetBrokerUrl())
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("the survivor never took the topic: %v", lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cli := scli
	for seq := int64(n); seq < n+5; {
		payload := fmt.Appendf(nil, "after-takeover-%d", seq)
		_, r, err := rawSendPayload(ctx, cli, topic, "p2", seq, payload)
		if err == nil && r.GetError() == nil {
			acked[string(payload)] = r.GetMessageId()
			seq++
			continue
		}
		if err == nil {
			err = fmt.Errorf("%v", r.GetError())
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("the topic never loaded on the survivor: %v", lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if lastErr != nil {
		t.Logf("sends failed while the topic loaded: %v", lastErr)
	}
	// Without a tail cache the last entry is readable only once the open
	// ledger's last-add-confirmed moves past it: one more send moves it.
	const lacMover = "lac-mover"
	if _, r, err := rawSendPayload(ctx, cli, topic, "p2", n+5, []byte(lacMover)); err != nil || r.GetError() != nil {
		t.Fatalf("last send: %v %v", err, r.GetError())
	}
	if logs.count("takeover scan: entry lost") == 0 {
		t.Errorf("no log line names the lost entry the takeover scan skipped")
	}
	resp, err := http.Get("http://" + rc.Broker(survivor).HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nmeridian_broker_takeover_lost_entries_total 1\n") {
		t.Errorf("metrics lack meridian_broker_takeover_lost_entries_total 1")
	}
	// Dedup state was rebuilt from the readable entries: producer p's last
	// sequence is its last readable batch, and a resend of a readable batch
	// is answered as a duplicate.
	opened, r, err := rawSendPayload(ctx, cli, topic, "p", 5, []byte("resend-5"))
	if err != nil {
		t.Fatal(err)
	}
	if opened.GetLastSequenceId() != n-1 || !r.GetDuplicate() {
		t.Fatalf("after takeover: producer p opened at last sequence %d (want %d); resend of 5: duplicate=%v %v",
			opened.GetLastSequenceId(), n-1, r.GetDuplicate(), r)
	}

	// The subscription delivers everything before the lost entry, then
	// stops there visibly; a confirmed skip lets the rest through.
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	_, sadm := conn(t, rc.Addrs()[survivor])
	got := map[string]int{}
	for len(got) < lost {
		_, data := c.next()
		got[data]++
	}
	waitFor(t, "stats to show the subscription blocked at the lost entry", func() bool {
		st, err := sadm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		if err != nil || len(st.GetSubscriptions()) == 0 {
			return false
		}
		b := st.GetSubscriptions()[0].GetBlocked()
		return b.GetLost() && b.GetPosition().GetLedgerId() == lostID.GetLedgerId() && b.GetPosition().GetEntryId() == lostID.GetEntryId()
	})
	t.Logf("received the %d messages before the lost entry; the subscription is blocked there", len(got))
	if _, err := sadm.SkipLostEntries(ctx, &clientv1.SkipLostEntriesRequest{Topic: topic, Subscription: "s",
		Target: &clientv1.SkipLostEntriesRequest_Entry{Entry: lostID}, Confirm: true}); err != nil {
		t.Fatal(err)
	}
	for len(got) < len(acked) {
		id, data := c.next()
		if data == lacMover {
			continue
		}
		got[data]++
		t.Logf("received %v (%d of %d)", id, len(got), len(acked))
	}
	dups := 0
	for k, v := range got {
		if _, ok := acked[k]; !ok {
			t.Errorf("delivered a message never acknowledged (%d bytes)", len(k))
		}
		dups += v - 1
	}
	for k, id := range acked {
		if got[k] == 0 {
			t.Errorf("acknowledged message at %v lost", id)
		}
	}
	if got[string(lostPayload)] > 0 {
		t.Errorf("the lost entry was delivered")
	}
	t.Logf("delivered %d acknowledged messages (1 lost and skipped), %d duplicates", len(got), dups)
}

// rawSendPayload is rawSend with a chosen payload.
func rawSendPayload(ctx context.Context, cli clientv1.MeridianClient, topic, name string, seq int64, payload []byte) (*clientv1.ProducerOpened, *clientv1.SendReceipt, error) {
	return rawSendWithin(ctx, 30*time.Second, cli, topic, name, seq, payload)
}
