package client

import (
	"errors"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc/codes"
)

func TestBatchBuilderSplitsOnReplicationOptions(t *testing.T) {
	bb := newBatchBuilder(100, 1<<20)
	msgs := []*Message{
		{Payload: []byte("a")},
		{Payload: []byte("b")},
		{Payload: []byte("c"), ReplicateTo: []string{"x"}},
		{Payload: []byte("d"), ReplicateTo: []string{"x"}},
		{Payload: []byte("e"), ReplicateTo: []string{"x", "y"}},
		{Payload: []byte("f"), DisableReplication: true},
		{Payload: []byte("g")},
	}
	var closed []*batch
	for i, m := range msgs {
		if c, _ := bb.add(pendingMsg{msg: m, seq: int64(i)}); c != nil {
			closed = append(closed, c)
		}
	}
	closed = append(closed, bb.take())
	var sizes []int
	for _, b := range closed {
		sizes = append(sizes, len(b.msgs))
		for _, pm := range b.msgs {
			if !sameReplication(pm.msg, b.msgs[0].msg) {
				t.Fatalf("batch mixes replication options: %v vs %v", pm.msg, b.msgs[0].msg)
			}
		}
	}
	want := []int{2, 2, 1, 1, 1}
	if len(sizes) != len(want) {
		t.Fatalf("batch sizes %v, want %v", sizes, want)
	}
	for i := range want {
		if sizes[i] != want[i] {
			t.Fatalf("batch sizes %v, want %v", sizes, want)
		}
	}
	if to, _ := closed[1].replication(); len(to) != 1 || to[0] != "x" {
		t.Fatalf("batch 1 replicate_to %v", to)
	}
	if _, disable := closed[3].replication(); !disable {
		t.Fatal("batch 3 should disable replication")
	}
}

func TestMessageReplicationValidation(t *testing.T) {
	many := make([]string, MaxReplicateTo+1)
	for i := range many {
		many[i] = "r"
	}
	for _, m := range []*Message{
		{ReplicateTo: []string{"a"}, DisableReplication: true},
		{ReplicateTo: many},
		{ReplicateTo: []string{""}},
	} {
		if err := m.validateReplication(); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: %v", m, err)
		}
	}
	if err := (&Message{ReplicateTo: many[:MaxReplicateTo]}).validateReplication(); err != nil {
		t.Fatal(err)
	}
}

func TestQuotaExceededMapping(t *testing.T) {
	e := &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_QUOTA_EXCEEDED, Message: "backlog quota exceeded"}
	for _, err := range []error{errorFromProto(e), mapError(statusWith(codes.ResourceExhausted, e))} {
		if !errors.Is(err, ErrQuotaExceeded) || !retryable(err) {
			t.Fatalf("%v: want retryable ErrQuotaExceeded", err)
		}
	}
}

func TestOriginIDOfReplicatedEntry(t *testing.T) {
	payload, usize, err := encodeBatch(&batch{msgs: []pendingMsg{{msg: &Message{Payload: []byte("a")}}, {msg: &Message{Payload: []byte("b")}}}}, CompressionNone)
	if err != nil {
		t.Fatal(err)
	}
	md := &clientv1.EntryMetadata{NumMessages: 2, UncompressedSize: usize, OriginRegion: "far",
		OriginLedgerId: 40, OriginEntryId: 41, Replicated: true}
	ent, _ := wire.EncodeEntry(md, payload)
	md2, p2, _ := wire.DecodeEntry(ent)
	msgs, err := decodeEntryMessage(&clientv1.Message{MessageId: &clientv1.MessageId{LedgerId: 3, EntryId: 4}, Metadata: md2, Payload: p2}, wire.MaxUncompressedBytes)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[1].OriginRegion != "far" || msgs[1].OriginID != "40:41:1" || msgs[1].ID != (MessageID{LedgerID: 3, EntryID: 4, BatchIndex: 1}) {
		t.Fatalf("replicated message: %+v", msgs[1])
	}
}
