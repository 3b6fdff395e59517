package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
)

// Cursor persistence.
//
// A cursor key (cursors/<topic>/<subscription>) is written only by the
// topic's owner, always with compare-and-set on the version its previous
// write returned. Three rules make a version mismatch mean exactly "another
// broker wrote it", never a race of this broker with itself:
//
//   - The writes of one subscription — the periodic persist, the persist on
//     close, the synchronous persist of an ack, an admin reset, a delete —
//     are serialized by subscription.persistMu, so each one starts from the
//     version the previous one produced.
//   - A write whose outcome is unknown (metadata.ErrUnknownOutcome) is
//     remembered; the next write re-reads the key and adopts the version if
//     that write was in fact applied.
//   - A broker taking a topic over rewrites every cursor it loads (same
//     value, compare-and-set): the version moves past every version the
//     previous owner knows, so a previous owner that still runs (paused past
//     its session, a "zombie") can never write the cursor again. The ledger
//     list is fenced the same way by the compare-and-set that records the
//     new owner's ledger.

// maxCursorPersistIntervalMs is the limit of the namespace policy
// cursor_persist_interval_ms (the broker's own limit is 1 h too).
const maxCursorPersistIntervalMs = int64(time.Hour / time.Millisecond)

// maxCursorFenceAttempts bounds how often a takeover re-reads a cursor the
// previous owner keeps writing while the takeover fences it.
const maxCursorFenceAttempts = 10

// unsureWrite is a cursor write whose outcome was unknown.
type unsureWrite struct {
	base int64 // version the write expected
	val  []byte
}

// persist writes the cursor if it changed since the last write (or always,
// with force). A version mismatch comes back as ErrTopicFenced: another
// broker owns the topic now.
func (s *subscription) persist(ctx context.Context, force bool) error {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	s.mu.Lock()
	if s.deleted || s.nonDurable || (!s.dirty && !force) {
		s.mu.Unlock()
		return nil
	}
	ext := s.coverExtLocked(s.t.b.cfg.MaxIndividualAcks)
	ext.BatchAcks = batchAcksToRecord(s.batchAcked, s.t.b.cfg.MaxIndividualAcks)
	val := encodeCursorExt(s.markDelete, s.acked, s.createdMs, s.t.b.cfg.MaxIndividualAcks, ext)
	version := s.version
	s.dirty = false
	s.mu.Unlock()
	kv, err := s.writeCursorLocked(ctx, val, version)
	if h := s.t.b.cfg.Testing.OnCursorPersist; h != nil {
		h(s.t.name.String(), s.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.dirty = true
		return err
	}
	s.version = kv.Version
	s.lastPersist = time.Now()
	return nil
}

// writeCursorLocked writes val over version. persistMu must be held.
func (s *subscription) writeCursorLocked(ctx context.Context, val []byte, version int64) (metadata.KV, error) {
	store := s.t.b.cfg.Regional
	if u := s.unsure; u != nil {
		cur, err := store.Get(ctx, s.key, metadata.ReadOptions{})
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			return metadata.KV{}, fmt.Errorf("%w: cursor %s was deleted by another broker", ErrTopicFenced, s.key)
		case err != nil:
			return metadata.KV{}, fmt.Errorf("%w: re-read cursor %s after a write of unknown outcome: %w", ErrUnavailable, s.key, err)
		}
		if cur.Version == u.base+1 && bytes.Equal(cur.Value, u.val) {
			version = cur.Version // that write was applied: its version is ours
		}
		s.unsure = nil
	}
	kv, err := store.Put(ctx, s.key, val, version, 0)
	switch {
	case err == nil:
		return kv, nil
	case errors.Is(err, metadata.ErrUnknownOutcome):
		s.unsure = &unsureWrite{base: version, val: val}
		return metadata.KV{}, fmt.Errorf("%w: write cursor %s: %w", ErrUnavailable, s.key, err)
	case errors.Is(err, metadata.ErrVersionMismatch):
		return metadata.KV{}, fmt.Errorf("%w: cursor %s changed by another broker: %w", ErrTopicFenced, s.key, err)
	}
	return metadata.KV{}, fmt.Errorf("%w: write cursor %s: %w", ErrUnavailable, s.key, err)
}

// deleteCursor deletes the cursor key under the same serialization and
// version guard as its writes, and marks the subscription deleted.
func (s *subscription) deleteCursor(ctx context.Context) error {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	if s.nonDurable {
		s.mu.Lock()
		s.deleted = true // a reader has no cursor key
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	version := s.version
	s.mu.Unlock()
	if s.unsure != nil {
		version = metadata.AnyVersion // our own write may have moved it; still only the owner deletes
	}
	err := s.t.b.cfg.Regional.Delete(ctx, s.key, version)
	switch {
	case errors.Is(err, metadata.ErrVersionMismatch):
		return fmt.Errorf("%w: cursor %s changed by another broker: %w", ErrTopicFenced, s.key, err)
	case err != nil && !errors.Is(err, metadata.ErrNotFound):
		return fmt.Errorf("%w: delete cursor: %w", ErrUnavailable, err)
	}
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
	return nil
}

// acknowledge applies an acknowledgement; when the namespace persists
// cursors synchronously (cursor_persist_interval_ms = 0) it returns only
// after the cursor is written, so an answered ack survives a broker crash.
func (s *subscription) acknowledge(ctx context.Context, ids []*clientv1.MessageId, cumulative bool) error {
	if err := s.ack(ids, cumulative); err != nil {
		return err
	}
	if s.t.persistInterval() > 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, s.t.b.cfg.OperationTimeout)
	defer cancel()
	err := s.persist(pctx, false)
	if errors.Is(err, ErrTopicFenced) {
		go s.t.b.unloadTopic(s.t, false, err)
	}
	return err
}

// persistInterval is how long an acknowledgement may stay only in memory:
// the namespace's cursor_persist_interval_ms, else the broker's
// CursorPersistInterval. 0 means: persist before answering the ack.
func (t *topic) persistInterval() time.Duration {
	t.mu.Lock()
	pol := t.policies
	t.mu.Unlock()
	if pol != nil && pol.CursorPersistIntervalMs != nil {
		return time.Duration(pol.GetCursorPersistIntervalMs()) * time.Millisecond
	}
	return t.b.cfg.CursorPersistInterval
}

// persistTick is the period of the topic's persist loop: the persist
// interval, or the broker's when acks persist synchronously (the loop then
// catches cursor changes that are not acks, and retries failed writes).
func (t *topic) persistTick() time.Duration {
	if d := t.persistInterval(); d > 0 {
		return d
	}
	return t.b.cfg.CursorPersistInterval
}

// fenceCursor rewrites a cursor this broker takes over, unchanged, with
// compare-and-set, so that its version moves past every version the
// previous owner knows. It returns the fenced key, or ErrNotFound when the
// cursor was deleted meanwhile.
func (t *topic) fenceCursor(ctx context.Context, kv metadata.KV) (metadata.KV, error) {
	store := t.b.cfg.Regional
	key := kv.Key
	for attempt := 1; ; attempt++ {
		fenced, err := store.Put(ctx, kv.Key, kv.Value, kv.Version, 0)
		if err == nil {
			return fenced, nil
		}
		if attempt >= maxCursorFenceAttempts || !errors.Is(err, metadata.ErrVersionMismatch) && !errors.Is(err, metadata.ErrUnknownOutcome) {
			return metadata.KV{}, fmt.Errorf("%w: fence cursor %s: %w", ErrUnavailable, key, err)
		}
		// The previous owner wrote it meanwhile (or our write's outcome is
		// unknown): fence what is there now.
		kv, err = store.Get(ctx, key, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return metadata.KV{}, fmt.Errorf("%w: cursor %s", ErrNotFound, key)
		}
		if err != nil {
			return metadata.KV{}, fmt.Errorf("%w: re-read cursor %s: %w", ErrUnavailable, key, err)
		}
	}
}

// ownsTopic reports whether the topic's ownership claim is held by this
// broker's current session (false when it cannot tell).
func (s *Server) ownsTopic(ctx context.Context, topic string) bool {
	s.mu.Lock()
	sid := s.session
	s.mu.Unlock()
	if sid == 0 || s.zombie.Load() {
		return false
	}
	kv, err := s.cfg.Regional.Get(ctx, ownerPrefix+topic, metadata.ReadOptions{})
	return err == nil && kv.Session == sid
}

// validateCursorPersistInterval checks the namespace policy.
func validateCursorPersistInterval(p *clientv1.NamespacePolicies) error {
	if p.CursorPersistIntervalMs == nil {
		return nil
	}
	if v := p.GetCursorPersistIntervalMs(); v < 0 || v > maxCursorPersistIntervalMs {
		return fmt.Errorf("%w: cursor_persist_interval_ms %d must be in [0 (persist before answering each ack), %d (1h)]", ErrInvalidArgument, v, maxCursorPersistIntervalMs)
	}
	return nil
}
