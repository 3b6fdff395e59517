package bookie_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Deleting ledgers then collecting garbage frees disk space, including in
// files shared with a live ledger (compaction), and the live ledger stays
// intact across restarts.
func TestDeleteAndGCFreeDisk(t *testing.T) {
	c := bookietest.StartCluster(t, 1, bookietest.WithConfig(func(i int, cfg *bookie.Config) {
		cfg.MaxJournalFileBytes = 1 << 20
		cfg.GCInterval = 0
	}))
	ctx := ctxT(t)
	cl := c.Client(0)
	const entries, size = 200, 4096
	// Interleave 4 ledgers so every journal file holds all of them.
	for e := int64(0); e < entries; e++ {
		for l := int64(1); l <= 4; l++ {
			if err := add(ctx, cl, l, e, payloadFor(l, e, size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	jdir, _ := c.Dirs(0)
	before := dirBytes(t, jdir)
	for l := int64(1); l <= 3; l++ {
		if _, err := cl.DeleteLedger(ctx, &bookiev1.DeleteLedgerRequest{LedgerId: l}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Server(0).GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := dirBytes(t, jdir)
	t.Logf("journal bytes before=%d after=%d; gc %+v", before, after, st)
	if st.EntriesRelocated == 0 || st.FilesDeleted == 0 {
		t.Fatalf("gc did not compact: %+v", st)
	}
	if after > before/2 {
		t.Fatalf("disk usage did not go down enough: %d -> %d bytes", before, after)
	}
	verify := func(when string) {
		for l := int64(1); l <= 3; l++ {
			if _, err := read(ctx, cl, l, 0); !errors.Is(err, bookie.ErrNoSuchLedger) {
				t.Fatalf("%s: deleted ledger %d: %v", when, l, err)
			}
		}
		for e := int64(0); e < entries; e++ {
			got, err := read(ctx, cl, 4, e)
			if err != nil || !bytes.Equal(got, payloadFor(4, e, size)) {
				t.Fatalf("%s: live ledger entry %d: %v", when, e, err)
			}
		}
	}
	verify("after gc")
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	verify("after crash")
	// A second GC after the restart removes what is left over.
	if _, err := c.Server(0).GC(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	verify("after clean restart")
}
