package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkPrivate fails for any file below dir readable or writable by
// group or others, and any directory below it (dir included) that is not
// mode 0700: data, secrets and cluster files belong to their user only.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while walking (a rotated log, a tmp file)
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 || d.Type()&fs.ModeSocket != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		n++
		perm := info.Mode().Perm()
		switch {
		case d.IsDir() && perm&0o077 != 0:
			t.Errorf("%s: directory mode %v, want 0700", p, perm)
		case !d.IsDir() && perm&0o077 != 0:
			t.Errorf("%s: file mode %v, want 0600", p, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%s: %d entries, expected a data directory", dir, n)
	}
}

// TestStandaloneDataIsPrivate: a standalone's data directory, after a
// produce, holds only files of mode 0600 and directories 0700 (Raft logs,
// bookie journals and ledgers, the address file included).
func TestStandaloneDataIsPrivate(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	grpcAddr, httpAddr := cliFreeAddr(t), cliFreeAddr(t)
	p := startProc(t, "standalone", "standalone", "--data-dir", data, "--grpc", grpcAddr, "--http", httpAddr)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 90*time.Second)
	if r := runCLI(t, "", "produce", "--url", grpcAddr, "--topic", "public/default/modes", "--count", "10"); r.code != 0 {
		t.Fatalf("produce: %d %s", r.code, r.stderr)
	}
	checkPrivate(t, data)
}
