package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// seekFixture produces m0..m9, notes a time, then m10..m19 (one message
// per entry), on a standalone region.
func seekFixture(t *testing.T) (*client.Client, string, []client.MessageID, time.Time) {
	t.Helper()
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	topic := "public/default/seek"
	p, err := c.NewProducer(tctx(t, 30*time.Second), client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	ids := produceN(t, p, 0, 10)
	time.Sleep(30 * time.Millisecond)
	at := time.Now()
	time.Sleep(30 * time.Millisecond)
	ids = append(ids, produceN(t, p, 10, 10)...)
	return c, topic, ids, at
}

func wantPayloads(t *testing.T, got []*client.ReceivedMessage, from, to int) {
	t.Helper()
	var want []string
	for i := from; i <= to; i++ {
		want = append(want, "m"+itoa(i))
	}
	if g := strings.Join(payloads(got), ","); g != strings.Join(want, ",") {
		t.Fatalf("got %s, want %s", g, strings.Join(want, ","))
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func readN(t *testing.T, r *client.Reader, n int) []*client.ReceivedMessage {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	var out []*client.ReceivedMessage
	for len(out) < n {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("next %d/%d: %v (got %v)", len(out), n, err, payloads(out))
		}
		out = append(out, m)
	}
	return out
}

// TestConsumerStartAndSeek: a new subscription starts at a time; Seek to a
// message ID goes back (acknowledged messages come again) and to an origin
// position goes forward; buffered messages from before a seek are never
// returned after it.
func TestConsumerStartAndSeek(t *testing.T) {
	c, topic, ids, at := seekFixture(t)
	start := client.StartAtTime(at)
	co, err := c.Subscribe(tctx(t, 30*time.Second), client.ConsumerOptions{Topic: topic, Subscription: "s", Start: &start})
	if err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, receiveN(t, co, 10, 30*time.Second, true), 10, 19)
	expectNothing(t, co, 300*time.Millisecond)
	if err := co.Seek(tctx(t, 30*time.Second), client.StartAtMessageID(ids[3])); err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, receiveN(t, co, 5, 30*time.Second, true), 3, 7)
	// m8.. are buffered now; the seek forward drops them.
	region := receiveN(t, co, 1, 30*time.Second, false)[0].OriginRegion
	if err := co.Seek(tctx(t, 30*time.Second), client.StartAtOrigin(client.OriginPosition{Region: region, LedgerID: ids[15].LedgerID, EntryID: ids[15].EntryID})); err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, receiveN(t, co, 5, 30*time.Second, true), 15, 19)
	expectNothing(t, co, 300*time.Millisecond)
	// Bad input: an origin position this region does not hold.
	err = co.Seek(tctx(t, 30*time.Second), client.StartAtOrigin(client.OriginPosition{Region: "nowhere", LedgerID: 1, EntryID: 1}))
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "seek.position.origin") {
		t.Fatalf("seek to an unknown origin: %v", err)
	}
	t.Logf("unknown origin: %v", err)
	if err := co.Seek(tctx(t, 30*time.Second), client.StartAtOrigin(client.OriginPosition{})); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("seek to an empty origin: %v", err)
	}
}

// TestReaderStartsSeeksAndResumes: readers start at a time, an ID or
// earliest, seek, and after their topic moves (unload) resume where they
// were with no duplicate and no gap.
func TestReaderStartsSeeksAndResumes(t *testing.T) {
	c, topic, ids, at := seekFixture(t)
	r, err := c.NewReader(tctx(t, 30*time.Second), client.ReaderOptions{Topic: topic, Start: client.StartAtTime(at)})
	if err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, readN(t, r, 10), 10, 19)
	if err := r.Seek(tctx(t, 30*time.Second), client.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, readN(t, r, 5), 0, 4)
	// The topic moves: the reader subscribes again and skips what it returned.
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.UnloadTopic(tctx(t, 30*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, readN(t, r, 15), 5, 19)
	if err := r.Close(tctx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r2, err := c.NewReader(tctx(t, 30*time.Second), client.ReaderOptions{Topic: topic, Start: client.StartAtMessageID(ids[17])})
	if err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, readN(t, r2, 3), 17, 19)
	// Readers leave no subscription behind once closed.
	_ = r2.Close(tctx(t, 10*time.Second))
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs, err := adm.ListSubscriptions(tctx(t, 10*time.Second), topic)
		if err == nil && len(subs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscriptions left after the readers closed: %v %v", subs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.NewReader(tctx(t, 30*time.Second), client.ReaderOptions{Topic: topic,
		Start: client.StartAtOrigin(client.OriginPosition{Region: "nowhere", LedgerID: 3, EntryID: 4})}); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "start.origin") {
		t.Fatalf("reader at an unknown origin: %v", err)
	}
}
