package security

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultPollInterval is how often watched files are re-read when no
// file-system event arrived (30s): events can be missed (network file
// systems, a watch limit reached, a directory that did not exist yet), and
// a slow poll bounds how long a rotation then goes unseen.
const DefaultPollInterval = 30 * time.Second

// debounce coalesces the burst of events one update makes (a Kubernetes
// Secret swap writes a new directory, then renames a symlink; an editor
// writes and renames) into one reload.
const debounce = 50 * time.Millisecond

// Watcher calls a function when any of a set of files may have changed: on
// a file-system event in a watched directory (the files' directories,
// and the directories their symlinks point into, because Kubernetes swaps
// Secret volumes through a `..data` symlink) and on a slow poll. The
// function is called from one goroutine at a time; it must itself decide
// whether anything changed (FileSet.Changed helps).
type Watcher struct {
	w      *fsnotify.Watcher
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

// WatchFiles starts a Watcher of paths calling onChange; poll <= 0 means
// DefaultPollInterval. A directory that cannot be watched is logged and
// left to the poll. Close stops it.
func WatchFiles(paths []string, poll time.Duration, log *slog.Logger, onChange func()) (*Watcher, error) {
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("security: file-system events unavailable; polling only", "err", err)
		fw = nil
	}
	w := &Watcher{w: fw, stop: make(chan struct{}), done: make(chan struct{})}
	if fw != nil {
		seen := map[string]bool{}
		for _, p := range paths {
			if p == "" {
				continue
			}
			dirs := []string{filepath.Dir(p)}
			if r, err := filepath.EvalSymlinks(p); err == nil {
				dirs = append(dirs, filepath.Dir(r))
			}
			for _, d := range dirs {
				if seen[d] {
					continue
				}
				seen[d] = true
				if err := fw.Add(d); err != nil {
					log.Warn("security: cannot watch directory; polling it", "dir", d, "err", err)
				}
			}
		}
	}
	go w.run(poll, onChange)
	return w, nil
}

func (w *Watcher) run(poll time.Duration, onChange func()) {
	defer close(w.done)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.w != nil {
		events, errs = w.w.Events, w.w.Errors
	}
	var fire <-chan time.Time
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			onChange()
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if fire == nil {
				fire = time.After(debounce)
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
			}
		case <-fire:
			fire = nil
			onChange()
		}
	}
}

// Close stops the watcher and waits for its goroutine. Idempotent.
func (w *Watcher) Close() error {
	w.closed.Do(func() {
		close(w.stop)
		<-w.done
		if w.w != nil {
			_ = w.w.Close()
		}
	})
	return nil
}

// fileSet reads a set of files and tells whether their content changed
// since the last read that was accepted.
type fileSet struct {
	paths []string
	last  [sha256.Size]byte
}

// read returns the files' contents and their combined hash.
func (f *fileSet) read() ([][]byte, [sha256.Size]byte, error) {
	h := sha256.New()
	out := make([][]byte, len(f.paths))
	for i, p := range f.paths {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, [sha256.Size]byte{}, err
		}
		fmt.Fprintf(h, "%d:%d:", i, len(b))
		h.Write(b)
		out[i] = b
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return out, sum, nil
}

// errUnchanged says a reload found the same content as the last one.
var errUnchanged = errors.New("security: files unchanged")
