// Package faultfs is the narrow file-system seam the bookie writes through:
// an interface over the few file operations it uses, the real OS
// implementation, and a fault-injecting wrapper (FaultFS) whose faults are
// switched on and off by method calls — failed writes, failed fsyncs, a full
// disk (ENOSPC), silently dropped or slowed operations — filtered by
// operation and path, plus media faults (a flipped bit, a cut tail) and a
// power loss that drops every byte not yet fsynced (PowerLoss). Tests and
// the chaos suite drive disk faults through it.
//
// The power loss is of file contents only: directory entries are taken as
// durable once made, and a kill -9 without PowerLoss keeps the page cache.
package faultfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// File is an open file. Write appends at the file's current offset (files
// are written sequentially only). Sync makes written data durable
// (fdatasync). Methods other than ReadAt are not safe for concurrent use;
// ReadAt may be called concurrently with everything except Close.
type File interface {
	Name() string
	Write(p []byte) (int, error)
	ReadAt(p []byte, off int64) (int, error)
	// Sync flushes written data to stable storage (fdatasync on Linux).
	Sync() error
	// Truncate cuts the file to size bytes.
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
}

// Usage is the space of the file system holding a directory.
type Usage struct {
	// Total and Free are bytes; Free counts space available to unprivileged users.
	Total uint64
	Free  uint64
}

// Used returns Total-Free.
func (u Usage) Used() uint64 {
	if u.Free > u.Total {
		return 0
	}
	return u.Total - u.Free
}

// Fraction returns Used/Total (0 when Total is 0).
func (u Usage) Fraction() float64 {
	if u.Total == 0 {
		return 0
	}
	return float64(u.Used()) / float64(u.Total)
}

// FS is the set of file operations the bookie uses. Implementations are safe
// for concurrent use.
type FS interface {
	// Create creates name (truncating an existing file) for reading and
	// appending writes.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	Rename(oldname, newname string) error
	Remove(name string) error
	MkdirAll(dir string) error
	// ReadDir returns the names (not paths) of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat returns the file's info.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes the directory's entries (creates, renames, removes) durable.
	SyncDir(dir string) error
	// DiskUsage reports the space of the file system holding dir.
	DiskUsage(dir string) (Usage, error)
}

// OS is the real file system.
type OS struct{}

var _ FS = OS{}

type osFile struct{ f *os.File }

func (o osFile) Name() string                            { return o.f.Name() }
func (o osFile) Write(p []byte) (int, error)             { return o.f.Write(p) }
func (o osFile) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }
func (o osFile) Sync() error                             { return fdatasync(o.f) }
func (o osFile) Truncate(size int64) error               { return o.f.Truncate(size) }
func (o osFile) Close() error                            { return o.f.Close() }
func (o osFile) Size() (int64, error) {
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Create implements FS.
func (OS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Open implements FS.
func (OS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// MkdirAll implements FS.
func (OS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// Stat implements FS.
func (OS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

// ReadDir implements FS.
func (OS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// SyncDir implements FS.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	return errors.Join(serr, cerr)
}

// DiskUsage implements FS.
func (OS) DiskUsage(dir string) (Usage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Usage{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	bs := uint64(st.Bsize)
	return Usage{Total: st.Blocks * bs, Free: st.Bavail * bs}, nil
}

// ReadFull reads len(p) bytes at off or fails (io.ErrUnexpectedEOF on a
// short file).
func ReadFull(f File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
