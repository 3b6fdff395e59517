package bookie_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

func TestCorruptEntryReportedAsCorrupt(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 10; e++ {
		if err := add(ctx, cl, 4, e, payloadFor(4, e, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	jdir, _ := c.Dirs(0)
	bookietest.FlipJournalByte(t, jdir, payloadFor(4, 3, 1024))
	check := func(when string) {
		t.Helper()
		if _, err := read(ctx, cl, 4, 3); !errors.Is(err, bookie.ErrEntryCorrupt) || bookie.IsNotFound(err) {
			t.Fatalf("%s: corrupt entry read: %v, want ErrEntryCorrupt", when, err)
		}
		for _, e := range []int64{2, 4, 9} {
			if got, err := read(ctx, cl, 4, e); err != nil || !bytes.Equal(got, payloadFor(4, e, 1024)) {
				t.Fatalf("%s: entry %d: %v", when, e, err)
			}
		}
	}
	check("live")
	// After a crash the entry is found by replaying the journal; after a
	// clean stop, through the checkpoint. Corrupt either way, never missing.
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	check("after crash")
	c.Stop(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	check("after clean restart")
}

// A damaged record header in the replayed part of the journal reads as
// corrupt, not missing (before the fix its entry read as "no such entry").
// Replay finds the next intact record but does not trust what follows the
// damage (a CRC-valid record may sit inside a payload): those entries read
// as corrupt too, until autorecovery rewrites them. The damage survives a
// checkpoint, and the bookie stays writable.
func TestReplayDamagedHeaderReadsCorrupt(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 10; e++ {
		if err := add(ctx, cl, 4, e, payloadFor(4, e, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	jdir, _ := c.Dirs(0)
	// The header sits right before the payload; damage its ledger field.
	files, _ := filepath.Glob(filepath.Join(jdir, "*.log"))
	damaged := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, payloadFor(4, 3, 1024))
		if i < 40 {
			continue
		}
		fh, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt([]byte{data[i-40+13] ^ 0xff}, int64(i-40+13)); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		damaged = true
	}
	if !damaged {
		t.Fatal("entry not found in the journal")
	}
	c.Kill(0) // no checkpoint: the whole journal is replayed
	for _, how := range []string{"after replay", "after a clean restart (checkpoint)"} {
		if err := c.Restart(0); err != nil {
			t.Fatal(err)
		}
		cl = c.Client(0)
		for e := int64(0); e < 10; e++ {
			got, err := read(ctx, cl, 4, e)
			if e >= 3 {
				if !errors.Is(err, bookie.ErrEntryCorrupt) || bookie.IsNotFound(err) {
					t.Fatalf("%s: entry %d at or after the damaged header: %v, want entry corrupt", how, e, err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, payloadFor(4, e, 1024)) {
				t.Fatalf("%s: entry %d before the damage: %v", how, e, err)
			}
		}
		if ro, why := c.Server(0).ReadOnly(); ro {
			t.Fatalf("%s: bookie read-only: %s", how, why)
		}
		c.Stop(0)
	}
}
