package broker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLostEntryBlocksVisiblyAndSkips loses one entry of a topic on every
// bookie (its bytes damaged on each replica). A consumer from earliest
// gets every entry before it; the subscription then stops at the lost
// entry and its stats say where and why; a skip without confirmation
// changes nothing; a confirmed skip lets the rest through, in order and
// without duplicates.
func TestLostEntryBlocksVisiblyAndSkips(t *testing.T) {
	logs := &countingLog{t: t}
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 3, Broker: func(_ int, c *broker.Config) {
		c.TailCacheBytes = 0 // every read goes to the bookies
		// No periodic persist racing the skip's own (serializing cursor
		// persists is another change).
		c.CursorPersistInterval = time.Hour
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}})
	cli, adm := conn(t, rc.Addrs()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	topic := "public/default/lost-entry"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	// Message n only moves the open ledger's last-add-confirmed past
	// message n-1 (there is no tail cache to serve it from).
	const n, lost = 40, 17
	payloads := make([][]byte, n+1)
	ids := make([]*clientv1.MessageId, n+1)
	for i := range n + 1 {
		payloads[i] = make([]byte, 512)
		_, _ = rand.Read(payloads[i])
		body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Key: "k", Payload: payloads[i]}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
		if err := p.st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: int64(i), NumMessages: 1,
			Compression: clientv1.CompressionType_COMPRESSION_TYPE_NONE, UncompressedSize: size, Payload: body}}}); err != nil {
			t.Fatal(err)
		}
		r, err := p.st.Recv()
		if err != nil || r.GetReceipt().GetError() != nil {
			t.Fatalf("send %d: %v %v", i, err, r.GetReceipt().GetError())
		}
		ids[i] = r.GetReceipt().GetMessageId()
	}
	copies, err := rc.Bookies.LoseEntry(ctx, ids[lost].GetLedgerId(), ids[lost].GetEntryId(), payloads[lost])
	if err != nil {
		t.Fatal(err)
	}
	if copies < 2 {
		t.Fatalf("damaged %d copies of entry %d, want every replica (>= 2)", copies, lost)
	}
	t.Logf("damaged %d copies of entry %d:%d", copies, ids[lost].GetLedgerId(), ids[lost].GetEntryId())

	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	got := map[string]int{}
	recv := func(want int) {
		t.Helper()
		id, data := c.next()
		got[data]++
		if data != string(payloads[want]) || id.GetEntryId() != ids[want].GetEntryId() || id.GetLedgerId() != ids[want].GetLedgerId() {
			t.Fatalf("received %d:%d, want message %d at %d:%d", id.GetLedgerId(), id.GetEntryId(), want, ids[want].GetLedgerId(), ids[want].GetEntryId())
		}
	}
	for i := range lost {
		recv(i)
	}
	t.Logf("received the %d messages before the lost one", lost)
	blocked := func() *clientv1.BlockedRead {
		st, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetSubscriptions()[0].GetBlocked()
	}
	waitFor(t, "stats to show the subscription blocked", func() bool { return blocked() != nil })
	b := blocked()
	if b.GetPosition().GetLedgerId() != ids[lost].GetLedgerId() || b.GetPosition().GetEntryId() != ids[lost].GetEntryId() || !b.GetLost() || b.GetReason() == "" {
		t.Fatalf("blocked stats %v, want lost at %d:%d with a reason", b, ids[lost].GetLedgerId(), ids[lost].GetEntryId())
	}
	t.Logf("blocked: %v", b)
	// The broker retries, but warns once (then at most once a minute).
	waitFor(t, "3 failed attempts", func() bool { return blocked().GetAttempts() >= 3 })
	if n := logs.count("dispatch blocked"); n != 1 {
		t.Errorf("%d 'dispatch blocked' warnings after %d attempts, want 1", n, blocked().GetAttempts())
	}

	// A readable entry is refused; an unconfirmed skip changes nothing.
	_, err = adm.SkipLostEntries(ctx, &clientv1.SkipLostEntriesRequest{Topic: topic, Subscription: "s",
		Target: &clientv1.SkipLostEntriesRequest_Entry{Entry: ids[lost+1]}, Confirm: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("skip of a readable entry: %v, want FailedPrecondition", err)
	}
	t.Logf("readable entry refused")
	dry, err := adm.SkipLostEntries(ctx, &clientv1.SkipLostEntriesRequest{Topic: topic, Subscription: "s",
		Target: &clientv1.SkipLostEntriesRequest_Entry{Entry: ids[lost]}})
	if err != nil || dry.GetApplied() || dry.GetEntries() != 1 || !strings.HasPrefix(dry.GetDescription(), "would ") {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	// The same over HTTP JSON; a request without a target names the field.
	resp, err := http.Post("http://"+rc.Broker(0).HTTPAddr()+"/admin/v1/SkipLostEntries", "application/json",
		strings.NewReader(fmt.Sprintf(`{"topic":%q,"subscription":"s","entry":{"ledgerId":"%d","entryId":"%d"}}`, topic, ids[lost].GetLedgerId(), ids[lost].GetEntryId())))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "would acknowledge 1 ") {
		t.Fatalf("HTTP dry run: %d %s", resp.StatusCode, body)
	}
	_, err = adm.SkipLostEntries(ctx, &clientv1.SkipLostEntriesRequest{Topic: topic, Subscription: "s", Confirm: true})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "target") {
		t.Fatalf("skip without a target: %v, want InvalidArgument naming the target", err)
	}
	if blocked() == nil {
		t.Fatal("dry run unblocked the subscription")
	}
	res, err := adm.SkipLostEntries(ctx, &clientv1.SkipLostEntriesRequest{Topic: topic, Subscription: "s",
		Target: &clientv1.SkipLostEntriesRequest_Entry{Entry: ids[lost]}, Confirm: true})
	if err != nil || !res.GetApplied() || res.GetEntries() != 1 {
		t.Fatalf("skip: %v %v", res, err)
	}
	t.Logf("skip: %s", res.GetDescription())
	for i := lost + 1; i < n; i++ {
		recv(i)
	}
	waitFor(t, "stats to show the subscription unblocked", func() bool { return blocked() == nil })
	delivered, dups := 0, 0
	for _, k := range got {
		delivered++
		dups += k - 1
	}
	if delivered != n-1 {
		t.Fatalf("delivered %d distinct messages, want %d (all but the lost one)", delivered, n-1)
	}
	t.Logf("delivered %d of %d messages (1 lost and skipped), %d duplicates", delivered, n, dups)
	if dups > 0 {
		t.Errorf("%d duplicates delivered", dups)
	}
}

// countingLog passes log lines to t.Log and counts them by substring.
type countingLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (w *countingLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
	w.t.Log(line)
	return len(p), nil
}

func (w *countingLog) count(sub string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}
