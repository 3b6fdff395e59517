package autorecovery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// session is a metadata session kept alive in the background; the keys an
// auditor or worker holds (leadership, locks) are ephemeral to it. When it
// expires, current() becomes 0 and the holder must assume it lost them.
type session struct {
	store metadata.Store
	ttl   time.Duration
	log   *slog.Logger

	mu sync.Mutex // guards id
	id metadata.SessionID
}

func newSession(store metadata.Store, ttl time.Duration, log *slog.Logger) *session {
	return &session{store: store, ttl: ttl, log: log}
}

// current returns the live session, 0 if none.
func (s *session) current() metadata.SessionID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// ensure returns the live session, creating one if needed.
func (s *session) ensure(ctx context.Context) (metadata.SessionID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != 0 {
		return s.id, nil
	}
	id, err := s.store.CreateSession(ctx, s.ttl)
	if err != nil {
		return 0, err
	}
	s.id = id
	return id, nil
}

// expired forgets id if it is still the current session.
func (s *session) expired(id metadata.SessionID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id == id {
		s.id = 0
	}
}

// run keeps the session alive until ctx ends. Keep-alives every third of the
// TTL survive one lost round.
func (s *session) run(ctx context.Context) {
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id := s.current()
		if id == 0 {
			continue
		}
		kctx, cancel := context.WithTimeout(ctx, s.ttl/2)
		err := s.store.KeepAlive(kctx, id)
		cancel()
		if errors.Is(err, metadata.ErrSessionExpired) {
			s.log.Warn("session expired; ephemeral keys are gone", "session", id)
			s.expired(id)
		} else if err != nil && ctx.Err() == nil {
			s.log.Warn("session keep-alive failed", "session", id, "err", err)
		}
	}
}

// close ends the session (deleting its ephemeral keys), bounded by timeout.
func (s *session) close(timeout time.Duration) {
	s.mu.Lock()
	id := s.id
	s.id = 0
	s.mu.Unlock()
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.store.CloseSession(ctx, id); err != nil {
		s.log.Warn("session close failed", "session", id, "err", err)
	}
}

// acquire creates key ephemeral to the session if it does not exist, and
// reports whether this session holds it. An unknown outcome is resolved by
// reading the key back.
func (s *session) acquire(ctx context.Context, key string, value []byte) (bool, error) {
	id, err := s.ensure(ctx)
	if err != nil {
		return false, err
	}
	_, err = s.store.Put(ctx, key, value, metadata.MustNotExist, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, metadata.ErrVersionMismatch):
		return false, nil
	case errors.Is(err, metadata.ErrSessionExpired):
		s.expired(id)
		return false, err
	case errors.Is(err, metadata.ErrUnknownOutcome):
		kv, gerr := s.store.Get(ctx, key, metadata.ReadOptions{})
		if gerr != nil {
			return false, err
		}
		return kv.Session == id, nil
	}
	return false, err
}

// holds reports whether key exists ephemeral to this session.
func (s *session) holds(ctx context.Context, key string) (bool, error) {
	id := s.current()
	if id == 0 {
		return false, nil
	}
	kv, err := s.store.Get(ctx, key, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return kv.Session == id, nil
}

// release deletes key if this session holds it.
func (s *session) release(ctx context.Context, key string) error {
	id := s.current()
	if id == 0 {
		return nil
	}
	kv, err := s.store.Get(ctx, key, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if kv.Session != id {
		return nil
	}
	err = s.store.Delete(ctx, key, kv.Version)
	if errors.Is(err, metadata.ErrNotFound) || errors.Is(err, metadata.ErrVersionMismatch) {
		return nil
	}
	return err
}
