package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// ListBookies reads the bookie registry (keys BookieRegistryPrefix+ID in a
// region's shard, JSON BookieInfo values): every registered bookie,
// writable or read-only, sorted by ID. Registrations are ephemeral, so a
// listed bookie's session is alive. rev is the lowest revision the pages
// were read at: watching from rev misses no change. Undecodable values are
// skipped and logged (log may be nil).
func ListBookies(ctx context.Context, store metadata.Store, log *slog.Logger) (bookies []BookieInfo, rev int64, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	page := metadata.Page{}
	for {
		res, err := store.List(ctx, BookieRegistryPrefix, page, metadata.ReadOptions{})
		if err != nil {
			return nil, 0, fmt.Errorf("topology: list bookie registry: %w", err)
		}
		if rev == 0 || res.Revision < rev {
			rev = res.Revision
		}
		for _, kv := range res.KVs {
			if b, ok := decodeBookie(kv, log); ok {
				bookies = append(bookies, b)
			}
		}
		if !res.More || len(res.KVs) == 0 {
			break
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	slices.SortFunc(bookies, func(a, b BookieInfo) int { return strings.Compare(a.ID, b.ID) })
	return bookies, rev, nil
}

// ListWritableBookies is ListBookies without the read-only bookies: the
// candidates for placement.
func ListWritableBookies(ctx context.Context, store metadata.Store) ([]BookieInfo, error) {
	all, _, err := ListBookies(ctx, store, nil)
	if err != nil {
		return nil, err
	}
	return Writable(all), nil
}

// Writable returns the bookies that are not read-only (a new slice).
func Writable(bookies []BookieInfo) []BookieInfo {
	out := make([]BookieInfo, 0, len(bookies))
	for _, b := range bookies {
		if !b.ReadOnly {
			out = append(out, b)
		}
	}
	return out
}

// decodeBookie decodes one registry value; the key's ID wins over an
// empty ID field.
func decodeBookie(kv metadata.KV, log *slog.Logger) (BookieInfo, bool) {
	id := strings.TrimPrefix(kv.Key, BookieRegistryPrefix)
	var b BookieInfo
	if err := json.Unmarshal(kv.Value, &b); err != nil {
		log.Warn("bookie registry: undecodable entry skipped", "key", kv.Key, "err", err)
		return BookieInfo{}, false
	}
	if b.ID == "" {
		b.ID = id
	}
	if b.ID != id {
		log.Warn("bookie registry: entry ID differs from its key; skipped", "key", kv.Key, "id", b.ID)
		return BookieInfo{}, false
	}
	return b, true
}

// BookieViewConfig configures a BookieView.
type BookieViewConfig struct {
	// Store is the region's metadata shard holding the registry; required.
	Store metadata.Store
	// Membership, if set, narrows Live and Writable to bookies whose ID is
	// a live gossip member: failure detection by gossip takes about a
	// second, a registry session expiry takes its TTL.
	Membership *Membership
	// RetryInterval is the wait before re-listing after a watch or list
	// error. Default 1 s.
	RetryInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// BookieView is an up-to-date, in-memory copy of a region's bookie
// registry, kept by a metadata watch (re-listed after any watch error).
// Safe for concurrent use.
type BookieView struct {
	cfg    BookieViewConfig
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	bookies map[string]BookieInfo
	rev     int64
	changed chan struct{} // closed and replaced on every change
}

// NewBookieView lists the registry (failing if that fails) and keeps the
// view current in the background until Close.
func NewBookieView(ctx context.Context, cfg BookieViewConfig) (*BookieView, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: BookieViewConfig.Store is required", ErrInvalidArgument)
	}
	if cfg.RetryInterval < 0 {
		return nil, fmt.Errorf("%w: RetryInterval %v must be ≥ 0", ErrInvalidArgument, cfg.RetryInterval)
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &BookieView{cfg: cfg, log: log.With("component", "bookie_view"), done: make(chan struct{}), changed: make(chan struct{})}
	list, rev, err := ListBookies(ctx, cfg.Store, v.log)
	if err != nil {
		return nil, err
	}
	v.reset(list, rev)
	runCtx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	go v.run(runCtx)
	return v, nil
}

// Close stops the watch. The view keeps its last contents.
func (v *BookieView) Close() {
	v.cancel()
	<-v.done
}

// All returns every registered bookie (read-only ones included), sorted by ID.
func (v *BookieView) All() []BookieInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]BookieInfo, 0, len(v.bookies))
	for _, b := range v.bookies {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b BookieInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Live returns the registered bookies that membership (if configured)
// also sees alive.
func (v *BookieView) Live() []BookieInfo {
	all := v.All()
	if v.cfg.Membership == nil {
		return all
	}
	out := all[:0]
	for _, b := range all {
		if _, ok := v.cfg.Membership.Member(b.ID); ok {
			out = append(out, b)
		}
	}
	return out
}

// Writable returns the live bookies that accept writes: the placement candidates.
func (v *BookieView) Writable() []BookieInfo { return Writable(v.Live()) }

// Revision is the registry revision the view reflects.
func (v *BookieView) Revision() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rev
}

// Changed returns a channel closed at the next change of the view.
func (v *BookieView) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

func (v *BookieView) reset(list []BookieInfo, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.bookies = make(map[string]BookieInfo, len(list))
	for _, b := range list {
		v.bookies[b.ID] = b
	}
	v.rev = rev
	v.notifyLocked()
}

func (v *BookieView) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *BookieView) apply(ev metadata.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	id := strings.TrimPrefix(ev.KV.Key, BookieRegistryPrefix)
	switch ev.Type {
	case metadata.EventPut:
		if b, ok := decodeBookie(ev.KV, v.log); ok {
			v.bookies[id] = b
		} else {
			delete(v.bookies, id)
		}
	case metadata.EventDelete:
		delete(v.bookies, id)
	}
	v.rev = ev.Revision
	v.notifyLocked()
}

// run watches the registry from the view's revision; after any error it
// waits RetryInterval, re-lists and watches again.
func (v *BookieView) run(ctx context.Context) {
	defer close(v.done)
	for {
		events, errs := v.cfg.Store.Watch(ctx, BookieRegistryPrefix, v.Revision())
		for ev := range events {
			v.apply(ev)
		}
		err := <-errs
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("bookie registry watch ended; re-listing", "err", err)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(v.cfg.RetryInterval):
			}
			list, rev, err := ListBookies(ctx, v.cfg.Store, v.log)
			if err == nil {
				v.reset(list, rev)
				break
			}
			if ctx.Err() != nil {
				return
			}
			v.log.Warn("bookie registry list failed; retrying", "err", err)
		}
	}
}
