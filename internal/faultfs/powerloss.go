package faultfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"syscall"
)

// ErrPowerLost is returned by every operation of a FaultFS after PowerLoss:
// the simulated machine is off, nothing more reaches the disk.
var ErrPowerLost = errors.New("faultfs: power lost")

// fileState is what the FaultFS knows of a file it created: the bytes
// written through it and the bytes known durable (written before a Sync
// that succeeded began).
type fileState struct {
	size, synced int64
}

// PowerLoss simulates a power cut: every file created through f loses the
// bytes written since its last successful Sync (it is truncated to its
// synced size; a file never synced becomes empty), then every later
// operation of f fails with ErrPowerLost. Files only opened for reading are
// not touched, and directory entries (creates, renames, removes) are taken
// as durable: the loss is of file contents only. It returns one line per
// file that lost bytes ("path synced=N lost=M").
//
// If a hook was set with SetPowerLossHook it runs last (the process's
// hook kills the process at once, like the power cut would).
func (f *FaultFS) PowerLoss() ([]string, error) {
	f.io.Lock() // no write, sync or truncate in flight
	f.mu.Lock()
	f.dead = true
	paths := make([]string, 0, len(f.files))
	for p := range f.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var lines []string
	var errs []error
	for _, p := range paths {
		st := f.files[p]
		if st.size <= st.synced {
			continue
		}
		if err := os.Truncate(p, st.synced); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		lines = append(lines, fmt.Sprintf("%s synced=%d lost=%d", p, st.synced, st.size-st.synced))
		st.size = st.synced
	}
	hook := f.powerHook
	f.mu.Unlock()
	f.io.Unlock()
	if hook != nil {
		hook()
	}
	return lines, errors.Join(errs...)
}

// SetPowerLossHook sets what PowerLoss does after truncating the files
// (nil: nothing, the FaultFS just fails every later operation). A process
// run under chaos sets KillSelf.
func (f *FaultFS) SetPowerLossHook(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.powerHook = hook
}

// KillSelf sends SIGKILL to the current process: after a power loss the
// process must not run a single shutdown step (a graceful stop could write
// or sync again).
func KillSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously
}

// Synced returns the bytes of path known durable and the bytes written to
// it through f (ok false when f did not create path).
func (f *FaultFS) Synced(path string) (synced, size int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.files[path]
	if st == nil {
		return 0, 0, false
	}
	return st.synced, st.size, true
}

// newest returns the most recently modified existing file seen by f (created,
// opened or renamed to) whose path contains sub.
func (f *FaultFS) newest(sub string) (string, os.FileInfo, error) {
	f.mu.Lock()
	var cands []string
	for p := range f.seen {
		if strings.Contains(p, sub) {
			cands = append(cands, p)
		}
	}
	f.mu.Unlock()
	sort.Strings(cands)
	var best string
	var bestInfo os.FileInfo
	for _, p := range cands {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			continue
		}
		if bestInfo == nil || st.ModTime().After(bestInfo.ModTime()) {
			best, bestInfo = p, st
		}
	}
	if bestInfo == nil {
		return "", nil, fmt.Errorf("%w: no non-empty file matching %q", ErrBadCommand, sub)
	}
	return best, bestInfo, nil
}

// Corrupt flips one bit of the newest non-empty file whose path contains
// sub (among the files f created or opened), at a random offset of its
// contents, and returns the file, the offset and the bit. The bytes are
// changed on disk directly (not through f), like a media error.
func (f *FaultFS) Corrupt(sub string) (path string, off int64, bit uint, err error) {
	if err := f.alive(); err != nil {
		return "", 0, 0, err
	}
	path, st, err := f.newest(sub)
	if err != nil {
		return "", 0, 0, err
	}
	off = rand.Int64N(st.Size())
	bit = rand.UintN(8)
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", 0, 0, err
	}
	defer file.Close()
	b := make([]byte, 1)
	if _, err := file.ReadAt(b, off); err != nil {
		return "", 0, 0, err
	}
	b[0] ^= 1 << bit
	if _, err := file.WriteAt(b, off); err != nil {
		return "", 0, 0, err
	}
	return path, off, bit, file.Sync()
}

// TruncateTail cuts the last n bytes (all of them if fewer) of the newest
// non-empty file whose path contains sub, on disk directly, and returns the
// file and its new size.
func (f *FaultFS) TruncateTail(sub string, n int64) (string, int64, error) {
	if err := f.alive(); err != nil {
		return "", 0, err
	}
	path, st, err := f.newest(sub)
	if err != nil {
		return "", 0, err
	}
	size := max(0, st.Size()-n)
	if err := os.Truncate(path, size); err != nil {
		return "", 0, err
	}
	f.mu.Lock()
	if fs := f.files[path]; fs != nil {
		fs.synced = min(fs.synced, size)
	}
	f.mu.Unlock()
	return path, size, nil
}

func (f *FaultFS) alive() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return ErrPowerLost
	}
	return nil
}
