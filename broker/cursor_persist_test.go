package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// storedMarkDelete reads a subscription's persisted mark-delete position
// and the cursor key's version.
func storedMarkDelete(t *testing.T, store metadata.Store, topic, sub string) ([2]int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := store.Get(ctx, "cursors/"+topic+"/"+sub, metadata.ReadOptions{})
	if err != nil {
		t.Fatalf("read cursor %s/%s: %v", topic, sub, err)
	}
	var rec struct {
		MD [2]int64 `json:"md"`
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.MD, kv.Version
}

// keepNamespace creates a namespace that retains everything (so resets to
// old positions always find their entries), with extra policy edits.
func keepNamespace(t *testing.T, adm clientv1.AdminClient, ns string, edit func(*clientv1.NamespacePolicies)) {
	t.Helper()
	p := &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1}
	if edit != nil {
		edit(p)
	}
	if _, err := adm.CreateNamespace(context.Background(), &clientv1.CreateNamespaceRequest{Namespace: ns, Policies: p}); err != nil {
		t.Fatal(err)
	}
}

// persistLog records every cursor write attempt a broker reports.
type persistLog struct {
	mu       sync.Mutex
	attempts []persistAttempt
}

type persistAttempt struct {
	sub string
	err error
}

func (l *persistLog) hook(_, sub string, err error) {
	l.mu.Lock()
	l.attempts = append(l.attempts, persistAttempt{sub, err})
	l.mu.Unlock()
}

func (l *persistLog) snapshot() []persistAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]persistAttempt(nil), l.attempts...)
}

// TestCursorPersistsSerialized races admin resets against a 1 ms periodic
// persist and against a graceful unload: a subscription's cursor writes are
// serialized, so none of them may see a version mismatch (which would read
// as "fenced" and unload the topic), and the stored cursor ends at the
// last reset.
func TestCursorPersistsSerialized(t *testing.T) {
	var log persistLog
	cli, adm, rc := oneBroker(t, func(c *broker.Config) {
		c.CursorPersistInterval = time.Millisecond
		c.Testing.OnCursorPersist = log.hook
	})
	ctx := context.Background()
	keepNamespace(t, adm, "public/serial", nil)
	topic := "public/serial/t"
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(50) {
		ids = append(ids, p.sendOK(i))
	}
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	st0, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	reset := func(id *clientv1.MessageId) error {
		_, err := adm.ResetSubscription(ctx, &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: "s",
			Position: &clientv1.ResetSubscriptionRequest_MessageId{MessageId: id}})
		return err
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				if err := reset(ids[(g*7+i*3)%len(ids)]); err != nil {
					failed.Add(1)
					t.Logf("reset %d/%d: %v", g, i, err)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d concurrent resets failed", n)
	}
	st1, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(st1.Ledgers) != len(st0.Ledgers) {
		t.Errorf("the topic was reloaded during the resets: %d ledgers, then %d", len(st0.Ledgers), len(st1.Ledgers))
	}
	// A reset, then at once a graceful unload whose final persist races the
	// periodic one: the stored cursor is the reset position, every round.
	for round, k := range []int{33, 7, 41, 12, 25} {
		if err := reset(ids[k]); err != nil {
			t.Fatalf("round %d: reset: %v", round, err)
		}
		if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
			t.Fatalf("round %d: unload: %v", round, err)
		}
		md, _ := storedMarkDelete(t, rc.Regional, topic, "s")
		if want := [2]int64{ids[k].LedgerId, ids[k].EntryId - 1}; md != want {
			t.Errorf("round %d: stored mark-delete %v after reset to %v, want %v", round, md, ids[k], want)
		}
	}
	mismatches := 0
	for _, a := range log.snapshot() {
		if errors.Is(a.err, metadata.ErrVersionMismatch) || errors.Is(a.err, broker.ErrTopicFenced) {
			mismatches++
		}
	}
	if mismatches > 0 {
		t.Errorf("%d cursor writes failed with a version mismatch although this broker was the only writer", mismatches)
	}
	t.Logf("%d cursor writes", len(log.snapshot()))
}

// faultyLedgers makes every add fail while fail is set.
type faultyLedgers struct {
	broker.LedgerStore
	fail *atomic.Bool
}

func (f faultyLedgers) Create(ctx context.Context, o broker.LedgerOptions) (broker.LedgerWriter, error) {
	w, err := f.LedgerStore.Create(ctx, o)
	if err != nil {
		return nil, err
	}
	return faultyWriter{w, f.fail}, nil
}

type faultyWriter struct {
	broker.LedgerWriter
	fail *atomic.Bool
}

func (w faultyWriter) AppendAsync(data []byte, cb func(int64, error)) {
	if w.fail.Load() {
		cb(-1, errors.New("injected add failure"))
		return
	}
	w.LedgerWriter.AppendAsync(data, cb)
}

// TestNonGracefulUnloadPersistsCursors fails an add, which unloads the
// topic non-gracefully while this broker still owns it: the
// acknowledgements made since the last periodic persist (which, at 1 h,
// never ran) are persisted anyway, so nothing acknowledged is redelivered.
func TestNonGracefulUnloadPersistsCursors(t *testing.T) {
	var fail atomic.Bool
	cli, adm, rc := oneBroker(t, func(c *broker.Config) {
		c.CursorPersistInterval = time.Hour
		c.Ledgers = faultyLedgers{c.Ledgers, &fail}
	})
	keepNamespace(t, adm, "public/ng", nil)
	topic := "public/ng/t"
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(20) {
		ids = append(ids, p.sendOK(i))
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for range 20 {
		c.next()
	}
	if e := c.ack(ids[9], true); e != nil {
		t.Fatal(e)
	}
	if e := c.ack(ids[15], false); e != nil {
		t.Fatal(e)
	}
	fail.Store(true)
	p.sendRefused(20, []byte("m20"))
	waitFor(t, "the topic to unload after the add failure", func() bool { return len(rc.Broker(0).OwnedTopics()) == 0 })
	fail.Store(false)
	c.cancel()
	c2 := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	got := c2.nextUntil("m19")
	want := "m10 m11 m12 m13 m14 m16 m17 m18 m19"
	if strings.Join(got, " ") != want {
		t.Fatalf("after a non-graceful unload got %v, want %s: acknowledgements were lost", got, want)
	}
}

// TestCursorPersistIntervalPolicyValidated: out-of-range values are
// refused with an error naming the field and its limits, changing nothing.
func TestCursorPersistIntervalPolicyValidated(t *testing.T) {
	_, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	for _, v := range []int64{-1, 3600001} {
		_, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/default",
			Policies: &clientv1.NamespacePolicies{CursorPersistIntervalMs: proto.Int64(v)}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cursor_persist_interval_ms") || !strings.Contains(err.Error(), "3600000") {
			t.Fatalf("cursor_persist_interval_ms=%d: %v", v, err)
		}
	}
	got, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "public/default"})
	if err != nil || got.Policies.CursorPersistIntervalMs != nil {
		t.Fatalf("a refused policy changed the namespace: %v %v", got, err)
	}
	for _, v := range []int64{0, 250, 3600000} {
		if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "public/default",
			Policies: &clientv1.NamespacePolicies{CursorPersistIntervalMs: proto.Int64(v)}}); err != nil {
			t.Fatalf("cursor_persist_interval_ms=%d refused: %v", v, err)
		}
	}
}

// TestSyncCursorPersistSurvivesKill: with cursor_persist_interval_ms = 0 an
// answered ack is durable; killing the owner (no graceful close, no
// periodic persist at 1 h) redelivers none of the acknowledged messages.
func TestSyncCursorPersistSurvivesKill(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 2, Broker: func(_ int, c *broker.Config) {
		c.CursorPersistInterval = time.Hour
	}})
	addrs := rc.Addrs()
	_, adm := conn(t, addrs[0])
	keepNamespace(t, adm, "public/sync", func(p *clientv1.NamespacePolicies) { p.CursorPersistIntervalMs = proto.Int64(0) })
	topic := "public/sync/t"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	cli, _ := conn(t, owner)
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(20) {
		ids = append(ids, p.sendOK(i))
	}
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for range 20 {
		c.next()
	}
	for _, a := range []struct {
		id  *clientv1.MessageId
		cum bool
	}{{ids[9], true}, {ids[12], false}, {ids[15], false}} {
		if e := c.ack(a.id, a.cum); e != nil {
			t.Fatal(e)
		}
	}
	rc.Kill(oi)
	other := addrs[1-oi]
	regiontest.LookupOwner(t, other, topic, func(o string) bool { return o == other })
	cli2, _ := conn(t, other)
	c2 := subscribe(t, cli2, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	got := c2.nextUntil("m19")
	// Every unacknowledged message is delivered (none lost), no acknowledged one is.
	want := "m10 m11 m13 m14 m16 m17 m18 m19"
	if strings.Join(got, " ") != want {
		t.Fatalf("after killing the owner got %v, want %s", got, want)
	}
}

// TestZombieOwnerCannotPersistCursor freezes the owner (no session
// keep-alive, no background loop, as SIGSTOP would) past its session, with
// an acknowledgement held only in its memory. The topic moves; then the
// zombie's cursor persist resumes first. It must fail (the new owner fenced
// the cursor when it took the topic), and the mark-delete must never move
// backwards: what the new owner's consumer acknowledged stays acknowledged.
func TestZombieOwnerCannotPersistCursor(t *testing.T) {
	const n = 100
	keepAlive := []*broker.Freezer{{}, {}}
	loops := []*broker.Freezer{{}, {}}
	logs := []*persistLog{{}, {}}
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 2, Broker: func(i int, c *broker.Config) {
		c.Testing.KeepAliveFreeze = keepAlive[i]
		c.Testing.TopicLoopFreeze = loops[i]
		c.Testing.OnCursorPersist = logs[i].hook
	}})
	t.Cleanup(func() {
		for i := range 2 {
			keepAlive[i].Thaw()
			loops[i].Thaw()
		}
	})
	addrs := rc.Addrs()
	_, adm := conn(t, addrs[0])
	keepNamespace(t, adm, "public/zombie", nil)
	topic := "public/zombie/t"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	zi := 0
	if owner == addrs[1] {
		zi = 1
	}
	ni := 1 - zi
	zcli, _ := conn(t, owner)
	p, _ := openProducer(t, zcli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(n) {
		ids = append(ids, p.sendOK(i))
	}
	// Every stored mark-delete, in order (all positions are in one ledger).
	wctx, wcancel := context.WithCancel(context.Background())
	t.Cleanup(wcancel)
	events, _ := rc.Regional.Watch(wctx, "cursors/"+topic+"/", 0)
	var stored []int64
	var storedMu sync.Mutex
	go func() {
		for ev := range events {
			var rec struct {
				MD [2]int64 `json:"md"`
			}
			if ev.Type == metadata.EventPut && json.Unmarshal(ev.KV.Value, &rec) == nil {
				storedMu.Lock()
				stored = append(stored, rec.MD[1])
				storedMu.Unlock()
			}
		}
	}()
	zc := subscribe(t, zcli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	for range n {
		zc.next()
	}
	if e := zc.ack(ids[39], true); e != nil {
		t.Fatal(e)
	}
	waitFor(t, "mark-delete 39 persisted", func() bool {
		md, _ := storedMarkDelete(t, rc.Regional, topic, "s")
		return md[1] == 39
	})
	// Freeze the owner, then acknowledge more on it: held only in memory.
	keepAlive[zi].Freeze()
	loops[zi].Freeze()
	waitFor(t, "the owner's topic loop to park", func() bool { return loops[zi].Parked() > 0 })
	if e := zc.ack(ids[69], true); e != nil {
		t.Fatal(e)
	}
	// Its session expires; the other broker takes the topic.
	newOwner := addrs[ni]
	regiontest.LookupOwner(t, newOwner, topic, func(o string) bool { return o == newOwner })
	ncli, _ := conn(t, newOwner)
	nc := subscribe(t, ncli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, payload := nc.next(); payload != "m40" {
		t.Fatalf("new owner delivered %s first, want m40", payload)
	}
	// The zombie's loop resumes before it notices its session is gone.
	before := len(logs[zi].snapshot())
	loops[zi].Thaw()
	waitFor(t, "the zombie's cursor persist", func() bool {
		for _, a := range logs[zi].snapshot()[before:] {
			if a.sub == "s" {
				return true
			}
		}
		return false
	})
	for _, a := range logs[zi].snapshot()[before:] {
		if a.sub == "s" && !errors.Is(a.err, metadata.ErrVersionMismatch) {
			t.Errorf("the zombie's cursor persist after the topic moved: %v, want a version mismatch", a.err)
		}
	}
	// The new owner's consumer goes on and acknowledges up to m89.
	nc.nextUntil("m89")
	if e := nc.ack(ids[89], true); e != nil {
		t.Fatal(e)
	}
	// ErrVersionMismatch on the new owner would unload the topic and reload
	// the zombie's older cursor: wait for 89 to be stored, then reconnect.
	waitFor(t, "mark-delete 89 persisted by the new owner", func() bool {
		md, _ := storedMarkDelete(t, rc.Regional, topic, "s")
		return md[1] == 89
	})
	keepAlive[zi].Thaw()
	nc.cancel()
	zc.cancel()
	owner2 := regiontest.LookupOwner(t, newOwner, topic, func(string) bool { return true })
	cli2, _ := conn(t, owner2)
	c2 := subscribe(t, cli2, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	if _, payload := c2.next(); payload != "m90" {
		t.Errorf("after the zombie resumed the subscription restarted at %s, want m90 (mark-delete moved backwards)", payload)
	}
	// Nothing unacknowledged is lost: m91..m99 follow.
	seen := map[string]int{}
	for {
		_, payload := c2.next()
		seen[payload]++
		if payload == fmt.Sprintf("m%d", n-1) {
			break
		}
	}
	for i := 91; i < n; i++ {
		if seen[fmt.Sprintf("m%d", i)] == 0 {
			t.Errorf("unacknowledged m%d never delivered: %v", i, seen)
		}
	}
	t.Logf("after m90: %d messages, %d distinct", func() int {
		total := 0
		for _, k := range seen {
			total += k
		}
		return total
	}(), len(seen))
	storedMu.Lock()
	defer storedMu.Unlock()
	t.Logf("stored mark-deletes: %v", stored)
	for i := 1; i < len(stored); i++ {
		if stored[i] < stored[i-1] {
			t.Errorf("stored mark-delete moved backwards: %v", stored)
			break
		}
	}
}

// slowListStore delays writes of ledger lists, widening the window in
// which two writers of one list overlap.
type slowListStore struct{ metadata.Store }

var listInflight, listOverlaps, listPuts atomic.Int64

func (s slowListStore) Put(ctx context.Context, key string, value []byte, version int64, session metadata.SessionID) (metadata.KV, error) {
	if strings.HasPrefix(key, "managed-ledgers/") {
		listPuts.Add(1)
		if listInflight.Add(1) > 1 {
			listOverlaps.Add(1)
		}
		defer listInflight.Add(-1)
		time.Sleep(5 * time.Millisecond)
	}
	return s.Store.Put(ctx, key, value, version, session)
}

// TestLedgerListWritesSerialized rolls a ledger over every 2 entries while
// retention runs every millisecond and deletes what the consumer passed:
// both compare-and-set the topic's ledger list, and the broker must never
// read its own concurrent write as another owner's (which fails sends and
// unloads the topic).
func TestLedgerListWritesSerialized(t *testing.T) {
	const n = 300
	cli, adm, _ := oneBroker(t, func(c *broker.Config) {
		c.RolloverEntries = 2
		c.RetentionInterval = time.Millisecond
		c.Regional = slowListStore{c.Regional}
	})
	ctx := context.Background()
	topic := "public/default/list-serial"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	// One send at a time, so that the ledger rolls over every 2 entries.
	receipts := make(chan error, 1)
	go func() {
		for i := range int64(n) {
			body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: fmt.Appendf(nil, "m%d", i)}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
			err := p.st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: i, NumMessages: 1, UncompressedSize: size, Payload: body}}})
			var r *clientv1.ProduceResponse
			if err == nil {
				r, err = p.st.Recv()
			}
			if err == nil && r.GetReceipt().GetError() != nil {
				err = fmt.Errorf("receipt %d: %v", r.GetReceipt().GetSequenceId(), r.GetReceipt().GetError())
			}
			if err != nil {
				receipts <- err
				return
			}
		}
		receipts <- nil
	}()
	// Consume in order, acknowledging each message without waiting.
	for i := 0; i < n; {
		r, err := c.st.Recv()
		if err != nil {
			t.Fatalf("consumer stream ended after %d messages (topic unloaded?): %v", i, err)
		}
		m := r.GetMessage()
		if m == nil {
			continue
		}
		i++
		if i%100 == 0 {
			c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 100}}})
		}
		if err := c.st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{MessageIds: []*clientv1.MessageId{m.MessageId}, Cumulative: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-receipts; err != nil {
		t.Fatalf("a send failed: %v", err)
	}
	st, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ledgers retained; %d ledger-list writes, %d of them overlapping another", len(st.Ledgers), listPuts.Load(), listOverlaps.Load())
}
