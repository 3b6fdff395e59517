package faultfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, fs FS, p string, data []byte, sync bool) File {
	t.Helper()
	f, err := fs.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// powerloss keeps exactly the bytes written before the last successful
// Sync of each file, and nothing works afterwards.
func TestPowerLossKeepsOnlySyncedBytes(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	a := writeFile(t, ffs, filepath.Join(dir, "a"), []byte("durable|"), true)
	if _, err := a.Write([]byte("volatile")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, ffs, filepath.Join(dir, "b"), []byte("never synced"), false)
	writeFile(t, ffs, filepath.Join(dir, "c"), []byte("all synced"), true)
	// A failed fsync makes nothing durable.
	d := writeFile(t, ffs, filepath.Join(dir, "d"), []byte("x"), true)
	id := ffs.FailSyncs("/d")
	d.Write([]byte("yz"))
	if err := d.Sync(); err == nil {
		t.Fatal("injected sync failure not reported")
	}
	ffs.Clear(id)

	ans, err := ffs.Exec("powerloss")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(ans)
	if !strings.HasPrefix(ans, "powerloss files=3") {
		t.Fatalf("answer %q", ans)
	}
	for name, want := range map[string]string{"a": "durable|", "b": "", "c": "all synced", "d": "x"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s after power loss: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := a.Write([]byte("more")); !errors.Is(err, ErrPowerLost) {
		t.Fatalf("write after power loss: %v", err)
	}
	if err := a.Sync(); !errors.Is(err, ErrPowerLost) {
		t.Fatalf("sync after power loss: %v", err)
	}
	if _, err := ffs.Create(filepath.Join(dir, "e")); !errors.Is(err, ErrPowerLost) {
		t.Fatalf("create after power loss: %v", err)
	}
}

// A rename carries the synced size along; the hook runs after the files
// are cut.
func TestPowerLossRenameAndHook(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	tmp, final := filepath.Join(dir, "x.tmp"), filepath.Join(dir, "x")
	f := writeFile(t, ffs, tmp, []byte("12345"), true)
	f.Write([]byte("678"))
	f.Close()
	if err := ffs.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	var sizeInHook int64 = -1
	ffs.SetPowerLossHook(func() {
		st, _ := os.Stat(final)
		sizeInHook = st.Size()
	})
	if _, err := ffs.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if sizeInHook != 5 {
		t.Fatalf("size seen by the hook %d, want 5", sizeInHook)
	}
}

func TestSlowCommand(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	f := writeFile(t, ffs, filepath.Join(dir, "journal-1"), []byte("x"), false)
	ans, err := ffs.Exec("slow sync journal 200ms 1")
	if err != nil || ans != "id 1" {
		t.Fatalf("%q %v", ans, err)
	}
	t0 := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Fatalf("slow sync took %v", d)
	}
	if n := ffs.Hits(OpSync); n != 1 {
		t.Fatalf("hits %d", n)
	}
	// count 1: disarmed.
	f.Write([]byte("y"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := ffs.Hits(OpSync); n != 1 {
		t.Fatalf("hits after the count %d", n)
	}
	if s, _, _ := ffs.Synced(filepath.Join(dir, "journal-1")); s != 2 {
		t.Fatalf("synced %d", s)
	}
	for _, bad := range []string{"slow sync", "slow sync journal", "slow sync journal 0s", "slow sync * 2m", "slow bogus 1s", "slow sync * 1s -1"} {
		if _, err := ffs.Exec(bad); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := ffs.Exec("slow any * 10ms"); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptAndTruncateCommands(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	orig := bytes.Repeat([]byte{0x5a}, 1000)
	writeFile(t, ffs, filepath.Join(dir, "journal-1"), orig, true).Close()
	p2 := filepath.Join(dir, "journal-2")
	// Make journal-2 clearly the newest.
	writeFile(t, ffs, p2, orig, true).Close()
	later := time.Now().Add(time.Second)
	os.Chtimes(p2, later, later)

	ans, err := ffs.Exec("corrupt journal")
	if err != nil {
		t.Fatal(err)
	}
	var path string
	var off int64
	var bit uint
	if _, err := fmt.Sscanf(ans, "corrupt %s offset=%d bit=%d", &path, &off, &bit); err != nil || path != p2 {
		t.Fatalf("answer %q: %v", ans, err)
	}
	got, _ := os.ReadFile(p2)
	diff := 0
	for i := range got {
		if got[i] != orig[i] {
			diff++
			if int64(i) != off || got[i]^orig[i] != 1<<bit {
				t.Fatalf("byte %d changed to %x; answer %q", i, got[i], ans)
			}
		}
	}
	if diff != 1 || len(got) != len(orig) {
		t.Fatalf("%d bytes changed, len %d", diff, len(got))
	}

	ans, err = ffs.Exec("truncate journal 300")
	if err != nil || ans != "truncate "+p2+" size=700" {
		t.Fatalf("%q %v", ans, err)
	}
	if st, _ := os.Stat(p2); st.Size() != 700 {
		t.Fatalf("size %d", st.Size())
	}
	if s, _, _ := ffs.Synced(p2); s != 700 {
		t.Fatalf("synced size after the cut: %d", s)
	}
	for _, bad := range []string{"corrupt", "corrupt nomatch", "truncate journal", "truncate journal 0", "truncate journal x", "powerloss now"} {
		if _, err := ffs.Exec(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
