package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBatchBuilderOneKeyAndDeliverTimePerBatch: a batch never mixes keys
// (Key_Shared routes whole entries by key) nor delivery times (the broker
// holds whole entries).
func TestBatchBuilderOneKeyAndDeliverTimePerBatch(t *testing.T) {
	bb := newBatchBuilder(100, 1<<20)
	msg := func(seq int64, key string, at int64) pendingMsg {
		return pendingMsg{msg: &Message{Key: key, Payload: []byte("x")}, seq: seq, accepted: time.Now(), deliverAt: at}
	}
	steps := []struct {
		m          pendingMsg
		closesPrev bool
	}{
		{msg(0, "a", 0), false},
		{msg(1, "a", 0), false},
		{msg(2, "b", 0), true},     // key changed
		{msg(3, "b", 5000), true},  // delivery time changed
		{msg(4, "b", 5000), false}, // same key and time: batched
		{msg(5, "", 5000), true},
		{msg(6, "", 0), true},
	}
	var batches []*batch
	for i, s := range steps {
		closed, _ := bb.add(s.m)
		if (closed != nil) != s.closesPrev {
			t.Fatalf("step %d: closed %v, want %v", i, closed != nil, s.closesPrev)
		}
		if closed != nil {
			batches = append(batches, closed)
		}
	}
	batches = append(batches, bb.take())
	want := []struct {
		n   int
		key string
		at  int64
	}{{2, "a", 0}, {1, "b", 0}, {2, "b", 5000}, {1, "", 5000}, {1, "", 0}}
	if len(batches) != len(want) {
		t.Fatalf("%d batches, want %d", len(batches), len(want))
	}
	for i, w := range want {
		b := batches[i]
		if len(b.msgs) != w.n || b.key() != w.key || b.deliverAt() != w.at {
			t.Fatalf("batch %d: %d msgs key %q at %d, want %+v", i, len(b.msgs), b.key(), b.deliverAt(), w)
		}
	}
}

// TestMessageDeliverTimeAndKeyValidation: DeliverAt wins over
// DeliverAfter; negative delays and over-long keys are refused.
func TestMessageDeliverTimeAndKeyValidation(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	if got := (&Message{DeliverAfter: time.Second}).deliverAtMs(now); got != 1_001_000 {
		t.Fatalf("DeliverAfter: %d", got)
	}
	if got := (&Message{DeliverAt: time.UnixMilli(5_000_000), DeliverAfter: time.Second}).deliverAtMs(now); got != 5_000_000 {
		t.Fatalf("DeliverAt: %d", got)
	}
	if got := (&Message{}).deliverAtMs(now); got != 0 {
		t.Fatalf("no delay: %d", got)
	}
	if err := (&Message{DeliverAfter: -time.Second}).validateDispatch(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "DeliverAfter") {
		t.Fatalf("negative DeliverAfter: %v", err)
	}
	if err := (&Message{Key: strings.Repeat("k", MaxKeyBytes+1)}).validateDispatch(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "Key is 257 bytes, limit 256") {
		t.Fatalf("long key: %v", err)
	}
}
