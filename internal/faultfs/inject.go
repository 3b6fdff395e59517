package faultfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Op names a file operation that a fault can target.
type Op string

// Operations a Fault can match.
const (
	OpCreate   Op = "create"
	OpOpen     Op = "open"
	OpWrite    Op = "write"
	OpSync     Op = "sync"
	OpRead     Op = "read"
	OpTruncate Op = "truncate"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpMkdir    Op = "mkdir"
	OpReadDir  Op = "readdir"
	OpStat     Op = "stat"
	OpSyncDir  Op = "syncdir"
)

// ErrInjected is the default error of an injected fault (it wraps EIO so
// code that checks for I/O errors sees one).
var ErrInjected = fmt.Errorf("faultfs: injected fault: %w", syscall.EIO)

// Fault describes one injected fault.
type Fault struct {
	// Op is the operation to fail ("" = every operation).
	Op Op
	// PathContains restricts the fault to paths containing this substring
	// ("" = every path). For Rename it matches either path.
	PathContains string
	// Err is the error returned (nil = ErrInjected). Ignored when Drop is set.
	Err error
	// Drop makes the operation report success without doing anything (a
	// lost write, a lost fsync, a lost rename...). For reads it is ignored.
	Drop bool
	// Count is how many matching operations the fault hits before it
	// disarms itself (0 = until cleared).
	Count int
	// Delay, when set, makes the operation wait this long and then run
	// normally (a slow disk); Err and Drop are ignored.
	Delay time.Duration
}

type rule struct {
	id   int
	f    Fault
	left int
}

// FaultFS wraps an FS and injects faults on command. Safe for concurrent use.
type FaultFS struct {
	base FS

	mu       sync.Mutex // guards the fields below
	nextID   int
	rules    []*rule
	diskFull bool
	usage    *Usage
	ops      map[Op]int
	hits     map[Op]int
	// files tracks the files created through f, for PowerLoss.
	files map[string]*fileState
	// seen holds every path created or opened through f, for Corrupt
	// and TruncateTail.
	seen      map[string]struct{}
	dead      bool // PowerLoss happened
	powerHook func()

	// io is held for reading across each write, sync and truncate so that
	// PowerLoss (holding it for writing) sees no operation in flight.
	io sync.RWMutex
}

var _ FS = (*FaultFS)(nil)

// New wraps base (OS{} when nil) with no fault armed.
func New(base FS) *FaultFS {
	if base == nil {
		base = OS{}
	}
	return &FaultFS{base: base, ops: map[Op]int{}, hits: map[Op]int{},
		files: map[string]*fileState{}, seen: map[string]struct{}{}}
}

// Inject arms a fault and returns its id for Clear.
func (f *FaultFS) Inject(ft Fault) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.rules = append(f.rules, &rule{id: f.nextID, f: ft, left: ft.Count})
	return f.nextID
}

// FailWrites makes every write to a path containing pathContains fail with
// ErrInjected until cleared; it returns the fault id.
func (f *FaultFS) FailWrites(pathContains string) int {
	return f.Inject(Fault{Op: OpWrite, PathContains: pathContains})
}

// FailSyncs makes every fsync of a path containing pathContains fail with
// ErrInjected until cleared; it returns the fault id.
func (f *FaultFS) FailSyncs(pathContains string) int {
	return f.Inject(Fault{Op: OpSync, PathContains: pathContains})
}

// DropNext makes the next count operations op on paths containing
// pathContains report success without doing anything.
func (f *FaultFS) DropNext(op Op, pathContains string, count int) int {
	return f.Inject(Fault{Op: op, PathContains: pathContains, Drop: true, Count: count})
}

// Clear disarms the fault with this id.
func (f *FaultFS) Clear(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.id == id {
			f.rules = append(f.rules[:i], f.rules[i+1:]...)
			return
		}
	}
}

// ClearAll disarms every fault, empties the disk and removes any usage override.
func (f *FaultFS) ClearAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
	f.diskFull = false
	f.usage = nil
}

// SetDiskFull fills (true) or empties (false) the simulated disk: when full,
// writes, creates and truncates fail with ENOSPC and DiskUsage reports no
// free space.
func (f *FaultFS) SetDiskFull(full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.diskFull = full
}

// SetUsage makes DiskUsage report u instead of the real figures (nil
// restores the real ones).
func (f *FaultFS) SetUsage(u *Usage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u == nil {
		f.usage = nil
		return
	}
	c := *u
	f.usage = &c
}

// Ops returns how many operations op were attempted (faulted or not).
func (f *FaultFS) Ops(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops[op]
}

// Hits returns how many operations op were faulted (failed or dropped).
func (f *FaultFS) Hits(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[op]
}

// check counts the operation and returns (drop, err) for it; for a slow
// fault it sleeps first (without the lock) and returns (false, nil).
func (f *FaultFS) check(op Op, paths ...string) (bool, error) {
	drop, delay, err := f.checkLocked(op, paths...)
	if delay > 0 {
		time.Sleep(delay)
	}
	return drop, err
}

func (f *FaultFS) checkLocked(op Op, paths ...string) (bool, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops[op]++
	if f.dead {
		f.hits[op]++
		return false, 0, &os.PathError{Op: string(op), Path: first(paths), Err: ErrPowerLost}
	}
	if f.diskFull && (op == OpWrite || op == OpCreate || op == OpTruncate) {
		f.hits[op]++
		return false, 0, &os.PathError{Op: string(op), Path: first(paths), Err: syscall.ENOSPC}
	}
	for i, r := range f.rules {
		if r.f.Op != "" && r.f.Op != op {
			continue
		}
		if r.f.PathContains != "" && !anyContains(paths, r.f.PathContains) {
			continue
		}
		if r.f.Count > 0 {
			r.left--
			if r.left <= 0 {
				f.rules = append(f.rules[:i], f.rules[i+1:]...)
			}
		}
		f.hits[op]++
		if r.f.Delay > 0 {
			return false, r.f.Delay, nil
		}
		if r.f.Drop && op != OpRead {
			return true, 0, nil
		}
		err := r.f.Err
		if err == nil {
			err = ErrInjected
		}
		return false, 0, &os.PathError{Op: string(op), Path: first(paths), Err: err}
	}
	return false, 0, nil
}

// beginIO holds f.io for reading for one write, sync or truncate and fails
// once the power is lost; call the returned func when done.
func (f *FaultFS) beginIO(op Op, path string) (func(), error) {
	f.io.RLock()
	if err := f.alive(); err != nil {
		f.io.RUnlock()
		return nil, &os.PathError{Op: string(op), Path: path, Err: err}
	}
	return f.io.RUnlock, nil
}

func first(p []string) string {
	if len(p) == 0 {
		return ""
	}
	return p[0]
}

func anyContains(paths []string, sub string) bool {
	for _, p := range paths {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}

type faultFile struct {
	fs   *FaultFS
	f    File
	name string
}

func (ff *faultFile) Name() string { return ff.f.Name() }

func (ff *faultFile) Write(p []byte) (int, error) {
	drop, err := ff.fs.check(OpWrite, ff.name)
	if err != nil {
		return 0, err
	}
	if drop {
		return len(p), nil
	}
	done, err := ff.fs.beginIO(OpWrite, ff.name)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := ff.f.Write(p)
	ff.fs.mu.Lock()
	if st := ff.fs.files[ff.name]; st != nil {
		st.size += int64(n)
	}
	ff.fs.mu.Unlock()
	return n, err
}

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if _, err := ff.fs.check(OpRead, ff.name); err != nil {
		return 0, err
	}
	return ff.f.ReadAt(p, off)
}

func (ff *faultFile) Sync() error {
	drop, err := ff.fs.check(OpSync, ff.name)
	if err != nil || drop {
		return err
	}
	done, err := ff.fs.beginIO(OpSync, ff.name)
	if err != nil {
		return err
	}
	defer done()
	// What was written before the fsync began is durable once it returns.
	ff.fs.mu.Lock()
	var before int64
	st := ff.fs.files[ff.name]
	if st != nil {
		before = st.size
	}
	ff.fs.mu.Unlock()
	if err := ff.f.Sync(); err != nil {
		return err
	}
	if st != nil {
		ff.fs.mu.Lock()
		st.synced = max(st.synced, before)
		ff.fs.mu.Unlock()
	}
	return nil
}

func (ff *faultFile) Truncate(size int64) error {
	drop, err := ff.fs.check(OpTruncate, ff.name)
	if err != nil || drop {
		return err
	}
	done, err := ff.fs.beginIO(OpTruncate, ff.name)
	if err != nil {
		return err
	}
	defer done()
	if err := ff.f.Truncate(size); err != nil {
		return err
	}
	ff.fs.mu.Lock()
	if st := ff.fs.files[ff.name]; st != nil {
		st.size = min(st.size, size)
		st.synced = min(st.synced, size)
	}
	ff.fs.mu.Unlock()
	return nil
}

func (ff *faultFile) Size() (int64, error) { return ff.f.Size() }
func (ff *faultFile) Close() error         { return ff.f.Close() }

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) {
	drop, err := f.check(OpCreate, name)
	if err != nil {
		return nil, err
	}
	if drop {
		return nil, &os.PathError{Op: "create", Path: name, Err: errors.New("faultfs: create dropped")}
	}
	file, err := f.base.Create(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.files[name] = &fileState{}
	f.seen[name] = struct{}{}
	f.mu.Unlock()
	return &faultFile{fs: f, f: file, name: name}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) {
	if _, err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.base.Open(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.seen[name] = struct{}{}
	f.mu.Unlock()
	return &faultFile{fs: f, f: file, name: name}, nil
}

// Rename implements FS.
func (f *FaultFS) Rename(oldname, newname string) error {
	drop, err := f.check(OpRename, oldname, newname)
	if err != nil || drop {
		return err
	}
	if err := f.base.Rename(oldname, newname); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.files[oldname]; ok {
		f.files[newname] = st
		delete(f.files, oldname)
	} else {
		delete(f.files, newname)
	}
	delete(f.seen, oldname)
	f.seen[newname] = struct{}{}
	return nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	drop, err := f.check(OpRemove, name)
	if err != nil || drop {
		return err
	}
	if err := f.base.Remove(name); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.files, name)
	delete(f.seen, name)
	f.mu.Unlock()
	return nil
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string) error {
	drop, err := f.check(OpMkdir, dir)
	if err != nil || drop {
		return err
	}
	return f.base.MkdirAll(dir)
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(dir string) ([]string, error) {
	if _, err := f.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return f.base.ReadDir(dir)
}

// Stat implements FS.
func (f *FaultFS) Stat(name string) (os.FileInfo, error) {
	if _, err := f.check(OpStat, name); err != nil {
		return nil, err
	}
	return f.base.Stat(name)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	drop, err := f.check(OpSyncDir, dir)
	if err != nil || drop {
		return err
	}
	return f.base.SyncDir(dir)
}

// DiskUsage implements FS; it reports the override, or no free space when
// the disk is full, else the real figures.
func (f *FaultFS) DiskUsage(dir string) (Usage, error) {
	f.mu.Lock()
	full, over := f.diskFull, f.usage
	f.mu.Unlock()
	if over != nil {
		return *over, nil
	}
	u, err := f.base.DiskUsage(dir)
	if err != nil {
		return u, err
	}
	if full {
		u.Free = 0
	}
	return u, nil
}
