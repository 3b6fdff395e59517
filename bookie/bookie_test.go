package bookie_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

func TestAddReadRoundTrip(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 50; e++ {
		if err := add(ctx, cl, 7, e, payloadFor(7, e, int(e*37))); err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	for e := int64(0); e < 50; e++ {
		got, err := read(ctx, cl, 7, e)
		if err != nil {
			t.Fatalf("read %d: %v", e, err)
		}
		if !bytes.Equal(got, payloadFor(7, e, int(e*37))) {
			t.Fatalf("entry %d: payload mismatch", e)
		}
	}
	// -1 reads the last entry.
	r, err := cl.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: 7, EntryId: -1})
	if err != nil || r.EntryId != 49 || r.LastAddConfirmed != 48 {
		t.Fatalf("read last: %v %+v", err, r)
	}
	lac, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 7})
	if err != nil || lac.LastAddConfirmed != 48 || lac.LastEntryId != 49 || lac.Fenced {
		t.Fatalf("lac: %v %+v", err, lac)
	}
	// Range read with a byte limit: stops early but sends at least one entry.
	st, err := cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 7, FirstEntryId: 10, LastEntryId: 49})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(10)
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.EntryId != next || !bytes.Equal(m.Payload, payloadFor(7, next, int(next*37))) {
			t.Fatalf("range: got entry %d want %d", m.EntryId, next)
		}
		next++
	}
	if next != 50 {
		t.Fatalf("range ended at %d", next)
	}
	st, _ = cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: 7, FirstEntryId: 10, LastEntryId: 49, MaxBytes: 1})
	n := 0
	for {
		_, err := st.Recv()
		if err != nil {
			break
		}
		n++
	}
	if n != 1 {
		t.Fatalf("range with max_bytes=1 sent %d entries, want 1", n)
	}
	// Missing entry vs missing ledger.
	if _, err := read(ctx, cl, 7, 50); !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("missing entry: %v", err)
	}
	if _, err := read(ctx, cl, 8, 0); !errors.Is(err, bookie.ErrNoSuchLedger) {
		t.Fatalf("missing ledger: %v", err)
	}
}
