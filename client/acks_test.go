package client

import (
	"log/slog"
	"testing"
)

func newTrackingConsumer() *Consumer {
	return &Consumer{log: slog.New(slog.DiscardHandler), batches: map[entryKey]*batchAcks{}, lastEntry: MessageID{LedgerID: -1}}
}

func TestIndividualAcksInsideABatch(t *testing.T) {
	co := newTrackingConsumer()
	co.noteDelivered(MessageID{LedgerID: 1, EntryID: 0}, 1, nil)
	co.noteDelivered(MessageID{LedgerID: 1, EntryID: 1}, 3, nil)
	if !co.individualTarget(MessageID{LedgerID: 1, EntryID: 0, BatchIndex: 0}) {
		t.Fatal("single-message entry must be acked at once")
	}
	if co.individualTarget(MessageID{LedgerID: 1, EntryID: 1, BatchIndex: 0}) || co.individualTarget(MessageID{LedgerID: 1, EntryID: 1, BatchIndex: 2}) || co.individualTarget(MessageID{LedgerID: 1, EntryID: 1, BatchIndex: 2}) {
		t.Fatal("batch acked before all its messages")
	}
	if !co.individualTarget(MessageID{LedgerID: 1, EntryID: 1, BatchIndex: 1}) {
		t.Fatal("batch not acked after its last message")
	}
	if len(co.batches) != 0 {
		t.Fatalf("tracker not released: %v", co.batches)
	}
	// A redelivery of a partly acked batch keeps what was acked.
	co.noteDelivered(MessageID{LedgerID: 1, EntryID: 2}, 2, nil)
	co.individualTarget(MessageID{LedgerID: 1, EntryID: 2, BatchIndex: 0})
	co.noteDelivered(MessageID{LedgerID: 1, EntryID: 2}, 2, nil)
	if !co.individualTarget(MessageID{LedgerID: 1, EntryID: 2, BatchIndex: 1}) {
		t.Fatal("redelivery reset the batch's acks")
	}
}

func TestCumulativeAckNeverCoversUnackedMessages(t *testing.T) {
	co := newTrackingConsumer()
	co.noteDelivered(MessageID{LedgerID: 2, EntryID: 0}, 4, nil)
	co.noteDelivered(MessageID{LedgerID: 2, EntryID: 1}, 4, nil)
	co.noteDelivered(MessageID{LedgerID: 3, EntryID: 0}, 4, nil) // after a rollover
	// Inside the first batch with no entry before it: nothing to send.
	if _, send := co.cumulativeTarget(MessageID{LedgerID: 2, EntryID: 0, BatchIndex: 1}); send {
		t.Fatal("cumulative ack inside the first batch sent an ack")
	}
	// Inside the third batch: ack up to the entry before it.
	target, send := co.cumulativeTarget(MessageID{LedgerID: 3, EntryID: 0, BatchIndex: 2})
	if !send || target != (MessageID{LedgerID: 2, EntryID: 1, BatchIndex: 0}) {
		t.Fatalf("target %v send %v, want 2:1:0", target, send)
	}
	if _, ok := co.batches[entryKey{2, 0}]; ok {
		t.Fatal("covered batches still tracked")
	}
	// The last message of the batch covers the whole entry.
	target, send = co.cumulativeTarget(MessageID{LedgerID: 3, EntryID: 0, BatchIndex: 3})
	if !send || target != (MessageID{LedgerID: 3, EntryID: 0, BatchIndex: 0}) || len(co.batches) != 0 {
		t.Fatalf("target %v send %v tracked %d", target, send, len(co.batches))
	}
	// A redelivered older batch never gets a "previous" entry above it.
	co.noteDelivered(MessageID{LedgerID: 4, EntryID: 5}, 1, nil)
	co.noteDelivered(MessageID{LedgerID: 4, EntryID: 2}, 3, nil) // redelivery
	if _, send := co.cumulativeTarget(MessageID{LedgerID: 4, EntryID: 2, BatchIndex: 0}); send {
		t.Fatal("cumulative ack inside a redelivered batch acked a later entry")
	}
}
