package ledger_test

import (
	"os"
	"path/filepath"
	"testing"
)

// rawSyncFile is a file for raw disk measurements: appending writes, each
// followed by fdatasync (the same primitive the bookie journal uses).
type rawSyncFile struct {
	f *os.File
}

func openRawSyncFile(tb testing.TB, dir, name string) *rawSyncFile {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return &rawSyncFile{f: f}
}

// writeSync appends p and makes it durable.
func (r *rawSyncFile) writeSync(tb testing.TB, p []byte) {
	if _, err := r.f.Write(p); err != nil {
		tb.Fatal(err)
	}
	if err := fdatasync(r.f); err != nil {
		tb.Fatal(err)
	}
}
