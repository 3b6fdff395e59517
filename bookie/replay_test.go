package bookie_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
)

// journalFiles returns the journal files of dir, in order.
func journalFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// findInJournal returns the file and offset where b starts.
func findInJournal(t *testing.T, dir string, b []byte) (string, int) {
	t.Helper()
	for _, f := range journalFiles(t, dir) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, b); i >= 0 {
			return f, i
		}
	}
	t.Fatal("bytes not found in the journal")
	return "", 0
}

// checkAcked asserts every acknowledged entry of ledger reads back intact.
func checkAcked(t *testing.T, cl bookiev1.BookieClient, ledger int64, entries []int64, size int) {
	t.Helper()
	ctx := ctxT(t)
	for _, e := range entries {
		got, err := read(ctx, cl, ledger, e)
		if err != nil || !bytes.Equal(got, payloadFor(ledger, e, size)) {
			t.Fatalf("acknowledged entry %d/%d lost after restart: %v", ledger, e, err)
		}
	}
}

// A torn tail whose header is intact ends the file: replay never looks for
// records inside the torn record's payload. Before the fix, a delete and a
// fence planted in a user's payload were applied after the tail was torn.
func TestTornTailNeverScansIntoPayload(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	var acked []int64
	for e := int64(0); e < 5; e++ {
		if err := add(ctx, cl, 1, e, payloadFor(1, e, 512)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, e)
	}
	// A user payload of ledger 2 that carries well-formed journal records:
	// a delete of ledger 1 and a fence of ledger 3.
	planted := append(bookie.EncodeRecordForTest(bookie.RecDeleteForTest, 1, -1, -1, nil),
		bookie.EncodeRecordForTest(bookie.RecFenceForTest, 3, -1, -1, nil)...)
	evil := append(append(bytes.Repeat([]byte{0xab}, 100), planted...), bytes.Repeat([]byte{0xcd}, 4000)...)
	if err := add(ctx, cl, 2, 0, evil); err != nil {
		t.Fatal(err)
	}
	jdir, _ := c.Dirs(0)
	c.Kill(0)
	// Tear the tail: the record of ledger 2 keeps its header and the
	// planted records, and loses the rest of its payload.
	f, at := findInJournal(t, jdir, evil)
	if err := os.Truncate(f, int64(at+100+len(planted)+10)); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	// The torn record was cut off the file, durably.
	if st, err := os.Stat(f); err != nil || st.Size() != int64(at-40) {
		t.Fatalf("torn file after recovery: %v, size %d, want cut at %d", err, st.Size(), at-40)
	}
	// ... and the cut is recorded as the first record of the next file
	// (type 4, truncate).
	files := journalFiles(t, jdir)
	if i := slices.Index(files, f); i < 0 || i+1 >= len(files) {
		t.Fatalf("no journal file after the torn one: %v", files)
	} else if next, err := os.ReadFile(files[i+1]); err != nil || len(next) < 40 || next[8] != 4 {
		t.Fatalf("next journal file %s does not start with a truncate record (%v, %d bytes)", files[i+1], err, len(next))
	}
	cl = c.Client(0)
	checkAcked(t, cl, 1, acked, 512)
	if _, err := read(ctx, cl, 2, 0); err != nil {
		t.Logf("torn entry 2/0 (acknowledged, then its tail torn by the test): %v", err)
	}
	// No phantom fence: ledger 3 is unknown and takes normal adds.
	if _, err := read(ctx, cl, 3, 0); !errors.Is(err, bookie.ErrNoSuchLedger) {
		t.Fatalf("ledger 3 after replay: %v, want no such ledger (a planted fence was applied?)", err)
	}
	if err := add(ctx, cl, 3, 0, payloadFor(3, 0, 10)); err != nil {
		t.Fatalf("add to ledger 3 after replay: %v (a planted fence was applied?)", err)
	}
	// The torn tail was cut off durably: a second restart finds a clean file.
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	checkAcked(t, cl, 1, acked, 512)
	if ro, why := c.Server(0).ReadOnly(); ro {
		t.Fatalf("bookie read-only after a torn tail: %s", why)
	}
}

// fillFirstFile adds entries of 64 KiB to ledger until the journal rolls to
// a second file, then a few more; it returns the acked entries and the last
// entry written to the first file.
func fillFirstFile(t *testing.T, c *bookietest.Cluster, ledger int64) (acked []int64, lastInFirst int64) {
	t.Helper()
	ctx := ctxT(t)
	cl := c.Client(0)
	jdir, _ := c.Dirs(0)
	first := journalFiles(t, jdir)[0]
	lastInFirst = -1
	for e := int64(0); ; e++ {
		if err := add(ctx, cl, ledger, e, payloadFor(ledger, e, 64<<10)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, e)
		if len(journalFiles(t, jdir)) > 1 && lastInFirst < 0 {
			lastInFirst = e
			// Which entry really ended the first file?
			data, err := os.ReadFile(first)
			if err != nil {
				t.Fatal(err)
			}
			for lastInFirst >= 0 && !bytes.Contains(data, payloadFor(ledger, lastInFirst, 64<<10)) {
				lastInFirst--
			}
		}
		if lastInFirst >= 0 && e > lastInFirst+3 {
			return acked, lastInFirst
		}
		if e > 200 {
			t.Fatal("journal never rolled")
		}
	}
}

func smallMaxJournal() bookietest.Option {
	return bookietest.WithConfig(func(_ int, cfg *bookie.Config) { cfg.MaxJournalFileBytes = 1 << 20 })
}

// A bad record at the end of a journal file that is not the last one is
// damage (the file was closed after a durable sync): its entry reads as
// corrupt, never as missing. Before the fix it read as "no such entry".
func TestBadTailOfClosedJournalFileIsCorrupt(t *testing.T) {
	for _, mode := range []string{"truncated", "bad-crc"} {
		t.Run(mode, func(t *testing.T) {
			c := bookietest.StartCluster(t, 1, smallMaxJournal())
			acked, lastInFirst := fillFirstFile(t, c, 7)
			jdir, _ := c.Dirs(0)
			c.Kill(0) // no checkpoint: every file is replayed
			f, at := findInJournal(t, jdir, payloadFor(7, lastInFirst, 64<<10))
			switch mode {
			case "truncated":
				if err := os.Truncate(f, int64(at+1000)); err != nil {
					t.Fatal(err)
				}
			case "bad-crc":
				fh, err := os.OpenFile(f, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fh.WriteAt([]byte{0xee, 0xee}, int64(at+500)); err != nil {
					t.Fatal(err)
				}
				fh.Close()
			}
			if err := c.Restart(0); err != nil {
				t.Fatal(err)
			}
			cl := c.Client(0)
			ctx := ctxT(t)
			if _, err := read(ctx, cl, 7, lastInFirst); !errors.Is(err, bookie.ErrEntryCorrupt) || bookie.IsNotFound(err) {
				t.Fatalf("entry at the damaged end of a closed file: %v, want entry corrupt", err)
			}
			var intact []int64
			for _, e := range acked {
				if e != lastInFirst {
					intact = append(intact, e)
				}
			}
			checkAcked(t, cl, 7, intact, 64<<10)
			if ro, why := c.Server(0).ReadOnly(); ro {
				t.Fatalf("bookie read-only after damage: %s", why)
			}
		})
	}
}

// A journal file under the checkpoint that lost its end turned the whole
// bookie read-only at the first read of an entry in the lost part, and again
// after every restart. The damaged entry must read as corrupt and the
// bookie stay writable.
func TestTruncatedJournalUnderCheckpointKeepsBookieWritable(t *testing.T) {
	c := bookietest.StartCluster(t, 1, smallMaxJournal())
	acked, lastInFirst := fillFirstFile(t, c, 8)
	jdir, _ := c.Dirs(0)
	c.Stop(0) // final checkpoint: the first file is under it
	f, at := findInJournal(t, jdir, payloadFor(8, lastInFirst, 64<<10))
	if err := os.Truncate(f, int64(at+1000)); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		if err := c.Restart(0); err != nil {
			t.Fatal(err)
		}
		cl := c.Client(0)
		ctx := ctxT(t)
		if _, err := read(ctx, cl, 8, lastInFirst); !errors.Is(err, bookie.ErrEntryCorrupt) {
			t.Fatalf("round %d: entry in the truncated part: %v, want entry corrupt", round, err)
		}
		if ro, why := c.Server(0).ReadOnly(); ro {
			t.Fatalf("round %d: one truncated journal file made the bookie read-only: %s", round, why)
		}
		if err := add(ctx, cl, 9, int64(round), payloadFor(9, int64(round), 100)); err != nil {
			t.Fatalf("round %d: add after reading a damaged entry: %v", round, err)
		}
		var intact []int64
		for _, e := range acked {
			if e != lastInFirst {
				intact = append(intact, e)
			}
		}
		checkAcked(t, cl, 8, intact, 64<<10)
		c.Stop(0)
	}
}

// A checkpoint that references journal files that are gone stops the
// bookie with an error naming them. Before the fix the bookie started and
// served "corrupt"/"io error" for entries it had acknowledged.
func TestCheckpointWithMissingJournalFilesRefusesToStart(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 5; e++ {
		if err := add(ctx, cl, 5, e, payloadFor(5, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	jdir, _ := c.Dirs(0)
	c.Stop(0)
	for _, f := range journalFiles(t, jdir) {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Restart(0)
	if err == nil {
		t.Fatal("bookie started with a checkpoint referencing missing journal files")
	}
	if !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "0000000000000001.log") {
		t.Fatalf("error does not name the missing file: %v", err)
	}
	t.Logf("start refused: %v", err)
}

// Journal files at or after the checkpoint position hold everything written
// since the checkpoint. When they are gone (here with every other journal
// file, while the checkpoint references none of them), the bookie refuses to
// start, naming the files. Before the fix it started, numbered its new
// journal file below the checkpoint position, and lost the entries it
// acknowledged there at the next restart (files below the position are never
// replayed); new files are now numbered at or above the position too.
func TestJournalLostAfterCheckpointRefusesToStart(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 5; e++ {
		if err := add(ctx, cl, 5, e, payloadFor(5, e, 100)); err != nil {
			t.Fatal(err)
		}
	}
	// Several checkpoints move the position forward; then the ledger is
	// deleted and GC removes every file it used.
	for range 3 {
		if err := add(ctx, cl, 6, 0, payloadFor(6, 0, 10)); err != nil && !errors.Is(err, bookie.ErrLedgerFenced) {
			t.Fatal(err)
		}
		if err := c.Server(0).Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []int64{5, 6} {
		if _, err := cl.DeleteLedger(ctx, &bookiev1.DeleteLedgerRequest{LedgerId: l}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Server(0).GC(ctx); err != nil {
		t.Fatal(err)
	}
	jdir, _ := c.Dirs(0)
	c.Stop(0)
	files := journalFiles(t, jdir)
	if len(files) == 0 {
		t.Fatal("no journal file left")
	}
	for _, f := range files {
		os.Remove(f)
	}
	err := c.Restart(0)
	if !errors.Is(err, bookie.ErrJournalMissing) || !strings.Contains(err.Error(), filepath.Base(files[len(files)-1])) {
		t.Fatalf("restart without the journal after the checkpoint: %v, want ErrJournalMissing naming %s", err, filepath.Base(files[len(files)-1]))
	}
	t.Logf("start refused: %v", err)
}

// A damaged header in the middle of a file: replay finds the next intact
// record to learn where the damage ends, which here is a delete planted in
// the damaged record's payload. Nothing after the damage is trusted: the
// delete is not applied, and the entries after it read as corrupt.
func TestDamagedHeaderPlantedDeleteNotApplied(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	var acked []int64
	for e := int64(0); e < 5; e++ {
		if err := add(ctx, cl, 1, e, payloadFor(1, e, 512)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, e)
	}
	planted := bookie.EncodeRecordForTest(bookie.RecDeleteForTest, 1, -1, -1, nil)
	evil := append(append(bytes.Repeat([]byte{0xab}, 100), planted...), bytes.Repeat([]byte{0xcd}, 1000)...)
	if err := add(ctx, cl, 2, 0, evil); err != nil {
		t.Fatal(err)
	}
	for e := int64(5); e < 8; e++ {
		if err := add(ctx, cl, 1, e, payloadFor(1, e, 512)); err != nil {
			t.Fatal(err)
		}
	}
	jdir, _ := c.Dirs(0)
	c.Kill(0)
	f, at := findInJournal(t, jdir, evil)
	fh, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte{0xff}, int64(at-40+13)); err != nil { // the ledger field of the header
		t.Fatal(err)
	}
	fh.Close()
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	checkAcked(t, cl, 1, acked, 512) // before the damage: intact, and not deleted
	for e := int64(5); e < 8; e++ {
		if _, err := read(ctx, cl, 1, e); !errors.Is(err, bookie.ErrEntryCorrupt) {
			t.Fatalf("entry 1/%d after the damage: %v, want entry corrupt", e, err)
		}
	}
	// Ledger 2's only record is the one with the damaged header: nothing on
	// this bookie names it, so it reads as unknown (a documented limit).
	if got, err := read(ctx, cl, 2, 0); err == nil {
		t.Fatalf("entry with the damaged header served %d bytes", len(got))
	} else {
		t.Logf("entry with the damaged header: %v", err)
	}
}
