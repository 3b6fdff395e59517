package ledger_test

import (
	"os"
	"path/filepath"
	"testing"
)

// rawSyncFile is a file for raw disk measurements: appending writes, each
// followed by fdatasync (the same primitive the bookie journal uses).
type rawSyncFile struct {
	f       *os.File
	path    string
	written int64
}

// rawFileLimit bounds a raw test file: past it the file is recreated, so a
// long bandwidth run does not fill the shared disk (writes stay appends).
const rawFileLimit = 256 << 20

func openRawSyncFile(tb testing.TB, dir, name string) *rawSyncFile {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	r := &rawSyncFile{f: f, path: f.Name()}
	tb.Cleanup(func() { r.f.Close(); os.Remove(r.path) })
	return r
}

// writeSync appends p and makes it durable.
func (r *rawSyncFile) writeSync(tb testing.TB, p []byte) {
	if r.written+int64(len(p)) > rawFileLimit {
		r.f.Close()
		f, err := os.Create(r.path)
		if err != nil {
			tb.Fatal(err)
		}
		r.f, r.written = f, 0
	}
	r.written += int64(len(p))
	if _, err := r.f.Write(p); err != nil {
		tb.Fatal(err)
	}
	if err := fdatasync(r.f); err != nil {
		tb.Fatal(err)
	}
}
