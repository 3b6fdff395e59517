package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// registration keeps the bookie's ephemeral registry key
// topology.BookieRegistryPrefix+ID (JSON topology.BookieInfo) alive under a
// metadata session, re-creating session and key after an expiry and
// rewriting the key when the read-only state changes.
type registration struct {
	s     *Server
	store metadata.Store

	notify     chan struct{} // a read-only change to publish
	registered atomic.Bool   // the key was written under the current session

	mu      sync.Mutex // guards session
	session metadata.SessionID
}

func newRegistration(s *Server) *registration {
	return &registration{s: s, store: s.cfg.Metadata, notify: make(chan struct{}, 1)}
}

// markDirty asks the keep-alive loop to rewrite the key now.
func (r *registration) markDirty() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Key returns the bookie's registry key.
func (r *registration) key() string { return topology.BookieRegistryPrefix + r.s.cfg.ID }

func (r *registration) info() topology.BookieInfo {
	ro, why := r.s.st.readOnly()
	if !ro {
		why = ""
	}
	return topology.BookieInfo{ID: r.s.cfg.ID, Address: r.s.advertised(), Region: r.s.cfg.Region, Rack: r.s.cfg.Rack, ReadOnly: ro,
		ReadOnlyReason: why, InstanceID: r.s.instanceID}
}

// register creates a session if needed and writes the key under it.
func (r *registration) register(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.session == 0 {
		id, err := r.store.CreateSession(ctx, r.s.cfg.SessionTTL)
		if err != nil {
			return fmt.Errorf("bookie: registry session: %w", err)
		}
		r.session = id
	}
	val, err := json.Marshal(r.info())
	if err != nil {
		return err
	}
	if _, err := r.store.Put(ctx, r.key(), val, metadata.AnyVersion, r.session); err != nil {
		if errors.Is(err, metadata.ErrSessionExpired) {
			r.session = 0
			r.registered.Store(false)
		}
		return fmt.Errorf("bookie: registry put %s: %w", r.key(), err)
	}
	r.registered.Store(true)
	return nil
}

// start tries to register once (bounded by ctx), then keeps the
// registration alive until bgCtx ends. A metadata store that is not
// reachable yet does not stop the bookie: registration is retried every
// half second until it succeeds (Server.Registered tells).
func (r *registration) start(ctx, bgCtx context.Context, wg *sync.WaitGroup) {
	if err := r.register(ctx); err != nil {
		r.s.log.Warn("bookie registration failed; retrying in the background", "err", err)
		r.markDirty()
	}
	wg.Add(1)
	go r.run(bgCtx, wg)
}

func (r *registration) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	// Keep-alives at a third of the TTL survive one lost round.
	t := time.NewTicker(r.s.cfg.SessionTTL / 3)
	defer t.Stop()
	retry := time.NewTicker(500 * time.Millisecond)
	defer retry.Stop()
	log := r.s.log
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.notify:
			dirty = true
		case <-t.C:
		case <-retry.C:
			if !dirty {
				continue
			}
		}
		opCtx, cancel := context.WithTimeout(ctx, r.s.cfg.SessionTTL/2)
		r.mu.Lock()
		sess := r.session
		r.mu.Unlock()
		var err error
		if sess != 0 {
			err = r.store.KeepAlive(opCtx, sess)
			if errors.Is(err, metadata.ErrSessionExpired) {
				log.Warn("registry session expired; re-registering", "session", sess)
				r.mu.Lock()
				r.session = 0
				r.mu.Unlock()
				r.registered.Store(false)
				dirty = true
			} else if err != nil {
				log.Warn("registry keep-alive failed", "err", err)
			}
		} else {
			dirty = true
		}
		if dirty {
			if err = r.register(opCtx); err != nil {
				log.Warn("registry update failed; will retry", "err", err)
			} else {
				dirty = false
			}
		}
		cancel()
	}
}

// leave closes the session, which deletes the registry key.
func (r *registration) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered.Store(false)
	if r.session == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.store.CloseSession(ctx, r.session); err != nil {
		r.s.log.Warn("registry session close failed", "err", err)
	}
	r.session = 0
}
