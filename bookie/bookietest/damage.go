package bookietest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// CorruptPayload flips one byte in the middle of every copy of payload
// found in bookie i's journal and ledger directories (payload should be
// unique, e.g. random bytes) and returns how many copies it damaged. It
// stands in for a replica lost to disk damage: the bookie then answers
// reads of that entry as corrupt. Safe while the bookie runs.
func (c *Cluster) CorruptPayload(i int, payload []byte) (int, error) {
	jdir, ldir := c.Dirs(i)
	n := 0
	for _, dir := range []string{jdir, ldir} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var offs []int
			for off := 0; ; {
				j := bytes.Index(data[off:], payload)
				if j < 0 {
					break
				}
				offs = append(offs, off+j+len(payload)/2)
				off += j + len(payload)
			}
			if len(offs) == 0 {
				return nil
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			for _, o := range offs {
				if _, err := f.WriteAt([]byte{data[o] ^ 0x5a}, int64(o)); err != nil {
					return err
				}
				n++
			}
			return f.Sync()
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// LoseEntry damages every copy of one entry on every running bookie (see
// CorruptPayload; payload must be the entry's unique payload) and waits
// until no bookie serves it intact any more. A copy the bookie wrote to
// another file after a pass (it moves entries from its journal to its
// ledger storage) is damaged by the next pass. It returns how many copies
// it damaged; it fails when ctx ends first.
func (c *Cluster) LoseEntry(ctx context.Context, ledgerID, entryID int64, payload []byte) (int, error) {
	total := 0
	for {
		for i := range c.N() {
			if !c.Running(i) {
				continue
			}
			n, err := c.CorruptPayload(i, payload)
			if err != nil {
				return total, err
			}
			total += n
		}
		served := ""
		for i := range c.N() {
			if !c.Running(i) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := c.Client(i).ReadEntry(rctx, &bookiev1.ReadEntryRequest{LedgerId: ledgerID, EntryId: entryID})
			cancel()
			if err == nil && bytes.Equal(resp.Payload, payload) {
				served = c.ID(i)
			}
		}
		if served == "" {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, fmt.Errorf("bookietest: bookie %s still serves entry %d/%d intact: %w", served, ledgerID, entryID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FlipJournalByte flips one byte in the middle of the first copy of
// payload found in the journal files (*.log) of dir, and fails the test if
// there is none.
func FlipJournalByte(t testing.TB, dir string, payload []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, payload)
		if i < 0 {
			continue
		}
		fh, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt([]byte{data[i+len(payload)/2] ^ 0x5a}, int64(i+len(payload)/2)); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("payload not found in the journal files of %s", dir)
}
