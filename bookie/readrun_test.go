package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

// readRangeAll reads ledger first..last with one ReadRange and returns the
// entry ids received in order (their payloads checked against payloadFor)
// and the error that ended the stream (nil at its normal end).
func readRangeAll(t *testing.T, ctx context.Context, cl bookiev1.BookieClient, ledger, first, last, maxBytes int64, size int) ([]int64, error) {
	t.Helper()
	st, err := cl.ReadRange(ctx, &bookiev1.ReadRangeRequest{LedgerId: ledger, FirstEntryId: first, LastEntryId: last, MaxBytes: maxBytes})
	if err != nil {
		return nil, bookie.FromStatus(err)
	}
	var got []int64
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, bookie.FromStatus(err)
		}
		if m.LedgerId != ledger || !bytes.Equal(m.Payload, payloadFor(ledger, m.EntryId, size)) {
			t.Fatalf("range of ledger %d: entry %d of ledger %d has a wrong payload", ledger, m.EntryId, m.LedgerId)
		}
		got = append(got, m.EntryId)
	}
}

func wantIDs(t *testing.T, what string, got []int64, from, to int64) {
	t.Helper()
	if int64(len(got)) != to-from+1 {
		t.Fatalf("%s: got %d entries %v, want %d..%d", what, len(got), got, from, to)
	}
	for i, e := range got {
		if e != from+int64(i) {
			t.Fatalf("%s: entry %d at %d, want %d..%d in order", what, e, i, from, to)
		}
	}
}

// ReadRange reads entries stored back to back with one read per run
// (meridian_bookie_read_runs_total counts them); runs break where another
// ledger's records sit in between, honour max_bytes (the entry crossing it
// is the last sent) and never hide a damaged record: the entries before it
// arrive, then DATA_LOSS, and the entry is flagged for single reads too.
func TestReadRangeCoalescedRuns(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	const size = 1024
	// Entries 0..19 of ledger 5 back to back, then 20..39 interleaved
	// with ledger 6.
	for e := int64(0); e < 40; e++ {
		if err := add(ctx, cl, 5, e, payloadFor(5, e, size)); err != nil {
			t.Fatal(err)
		}
		if e >= 20 {
			if err := add(ctx, cl, 6, e-20, payloadFor(6, e-20, size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	runs0 := metricValue(t, c.Server(0), "meridian_bookie_read_runs_total")
	got, err := readRangeAll(t, ctx, cl, 5, 0, 39, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "whole range", got, 0, 39)
	if runs := metricValue(t, c.Server(0), "meridian_bookie_read_runs_total") - runs0; runs < 1 {
		t.Fatalf("no coalesced read for 20 back-to-back entries (runs %v)", runs)
	}
	got, err = readRangeAll(t, ctx, cl, 6, 0, 19, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "interleaved ledger", got, 0, 19)
	// max_bytes: 10 entries of 1 KiB reach 10 KiB at entry 9.
	got, err = readRangeAll(t, ctx, cl, 5, 0, 39, 10*size, size)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "max_bytes 10 KiB", got, 0, 9)
	got, err = readRangeAll(t, ctx, cl, 5, 3, 39, 1, size)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "max_bytes 1", got, 3, 3)

	// Damage entry 12, inside the back-to-back run.
	jdir, _ := c.Dirs(0)
	bookietest.FlipJournalByte(t, jdir, payloadFor(5, 12, size))
	got, err = readRangeAll(t, ctx, cl, 5, 0, 39, 0, size)
	if !errors.Is(err, bookie.ErrEntryCorrupt) {
		t.Fatalf("range over a damaged entry ended with %v, want ErrEntryCorrupt", err)
	}
	wantIDs(t, "before the damage", got, 0, 11)
	if _, err := read(ctx, cl, 5, 12); !errors.Is(err, bookie.ErrEntryCorrupt) {
		t.Fatalf("single read of the damaged entry: %v, want ErrEntryCorrupt", err)
	}
	got, err = readRangeAll(t, ctx, cl, 5, 13, 39, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "after the damage", got, 13, 39)
	// A range reaching past the last entry ends at the last one.
	got, err = readRangeAll(t, ctx, cl, 5, 30, 45, 0, size)
	if !errors.Is(err, bookie.ErrNoSuchEntry) {
		t.Fatalf("range past the end ended with %v, want ErrNoSuchEntry", err)
	}
	wantIDs(t, "up to the end", got, 30, 39)
}
