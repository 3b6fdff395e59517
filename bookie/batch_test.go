package bookie_test

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

// TestAddEntriesBatch sends one AddEntries message carrying entries of two
// ledgers, an invalid entry and an add to a fenced ledger (after an empty
// message, which is ignored): every entry gets exactly one result with its
// request_id, failures are per entry, and the good entries read back.
func TestAddEntriesBatch(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	if _, err := cl.Fence(ctx, &bookiev1.FenceRequest{LedgerId: 22}); err != nil {
		t.Fatal(err)
	}
	st, err := cl.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&bookiev1.AddEntriesRequest{}); err != nil {
		t.Fatal(err)
	}
	var reqs []*bookiev1.AddEntryRequest
	want := map[uint64]codes.Code{}
	for e := int64(0); e < 5; e++ {
		reqs = append(reqs, &bookiev1.AddEntryRequest{LedgerId: 20, EntryId: e, Payload: payloadFor(20, e, 100+int(e)), LastAddConfirmed: e - 1})
	}
	reqs = append(reqs,
		&bookiev1.AddEntryRequest{LedgerId: 21, EntryId: 0, Payload: payloadFor(21, 0, 3000), LastAddConfirmed: -1},
		&bookiev1.AddEntryRequest{LedgerId: -1, EntryId: 0},
		&bookiev1.AddEntryRequest{LedgerId: 22, EntryId: 0, Payload: []byte("x"), LastAddConfirmed: -1})
	for i, r := range reqs {
		r.RequestId = uint64(100 + i)
		switch r.LedgerId {
		case -1:
			want[r.RequestId] = codes.InvalidArgument
		case 22:
			want[r.RequestId] = codes.FailedPrecondition
		default:
			want[r.RequestId] = codes.OK
		}
	}
	if err := st.Send(&bookiev1.AddEntriesRequest{Entries: reqs}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]codes.Code{}
	for len(got) < len(reqs) {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d results: %v", len(got), err)
		}
		for _, r := range m.Results {
			if _, dup := got[r.RequestId]; dup {
				t.Fatalf("two results for request %d", r.RequestId)
			}
			got[r.RequestId] = codes.Code(r.Code)
			if codes.Code(r.Code) == codes.FailedPrecondition && !errors.Is(bookie.FromCode(codes.Code(r.Code), r.Message), bookie.ErrLedgerFenced) {
				t.Fatalf("fenced add answered %q", r.Message)
			}
		}
	}
	for id, c := range want {
		if got[id] != c {
			t.Errorf("request %d: code %v, want %v", id, got[id], c)
		}
	}
	for _, r := range reqs[:6] {
		p, err := read(ctx, cl, r.LedgerId, r.EntryId)
		if err != nil || !bytes.Equal(p, r.Payload) {
			t.Fatalf("ledger %d entry %d: %v", r.LedgerId, r.EntryId, err)
		}
	}
	if _, err := read(ctx, cl, 22, 0); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("add to fenced ledger stored: %v", err)
	}
}
