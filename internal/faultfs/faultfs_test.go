package faultfs

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

func TestOSRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var fs FS = OS{}
	p := filepath.Join(dir, "a")
	f, err := fs.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello world")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if err := ReadFull(f, buf, 6); err != nil || string(buf) != "world" {
		t.Fatalf("%q %v", buf, err)
	}
	if err := ReadFull(f, buf, 8); err == nil {
		t.Fatal("short read not reported")
	}
	f.Close()
	if err := fs.Rename(p, p+"2"); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	names, err := fs.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0] != "a2" {
		t.Fatalf("%v %v", names, err)
	}
	u, err := fs.DiskUsage(dir)
	if err != nil || u.Total == 0 || u.Fraction() <= 0 || u.Fraction() > 1 {
		t.Fatalf("%+v %v", u, err)
	}
	if err := fs.Remove(p + "2"); err != nil {
		t.Fatal(err)
	}
}

func TestFaults(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	j := filepath.Join(dir, "journal.log")
	o := filepath.Join(dir, "other.log")
	fj, err := ffs.Create(j)
	if err != nil {
		t.Fatal(err)
	}
	fo, err := ffs.Create(o)
	if err != nil {
		t.Fatal(err)
	}
	// Path filter: only the journal's fsyncs fail.
	id := ffs.FailSyncs("journal")
	if err := fj.Sync(); !errors.Is(err, ErrInjected) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("journal sync: %v", err)
	}
	if err := fo.Sync(); err != nil {
		t.Fatalf("other sync: %v", err)
	}
	ffs.Clear(id)
	if err := fj.Sync(); err != nil {
		t.Fatal(err)
	}
	// Count: fail the next write only.
	ffs.Inject(Fault{Op: OpWrite, Count: 1})
	if _, err := fo.Write([]byte("x")); err == nil {
		t.Fatal("write not failed")
	}
	if _, err := fo.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	// Drop: the write reports success but does nothing.
	ffs.DropNext(OpWrite, "other", 1)
	if n, err := fo.Write([]byte("zzz")); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if sz, _ := fo.Size(); sz != 1 {
		t.Fatalf("dropped write landed: size %d", sz)
	}
	// Disk full: ENOSPC on writes, no free space reported.
	ffs.SetDiskFull(true)
	if _, err := fj.Write([]byte("a")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on full disk: %v", err)
	}
	if u, _ := ffs.DiskUsage(dir); u.Free != 0 {
		t.Fatalf("full disk reports %d free", u.Free)
	}
	ffs.SetDiskFull(false)
	ffs.SetUsage(&Usage{Total: 100, Free: 3})
	if u, _ := ffs.DiskUsage(dir); u.Fraction() != 0.97 {
		t.Fatalf("override: %+v", u)
	}
	ffs.ClearAll()
	if _, err := fj.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if ffs.Ops(OpSync) != 3 || ffs.Hits(OpSync) != 1 {
		t.Fatalf("counters: ops %d hits %d", ffs.Ops(OpSync), ffs.Hits(OpSync))
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	ffs := New(nil)
	f, err := ffs.Create(filepath.Join(dir, "journal.log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ffs.Command("fail sync journal 1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("sync: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("count 1 not honoured: %v", err)
	}
	if _, err := ffs.Command("usage 0.97"); err != nil {
		t.Fatal(err)
	}
	if u, _ := ffs.DiskUsage(dir); u.Fraction() < 0.969 || u.Fraction() > 0.971 {
		t.Fatalf("usage %v", u.Fraction())
	}
	if _, err := ffs.Command("full on"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: %v", err)
	}
	if _, err := ffs.Command("clear"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "explode", "fail frobnicate", "fail sync x -1", "usage 2", "full maybe"} {
		if _, err := ffs.Command(bad); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
