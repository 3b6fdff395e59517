package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Metadata keys in the region's shard.
const (
	// LedgerKeyPrefix prefixes every ledger's metadata key.
	LedgerKeyPrefix = "ledgers/"
	// LedgerIDCounterKey holds the next unreserved ledger ID (JSON
	// {"next":N}); clients reserve IDBatch IDs per CAS.
	LedgerIDCounterKey = "ledger-id-counter"
)

// LedgerKey returns the metadata key of ledger id: the ID zero-padded to 20
// decimal digits so keys list in ID order.
func LedgerKey(id int64) string {
	return fmt.Sprintf("%s%020d", LedgerKeyPrefix, id)
}

// ParseLedgerKey returns the ledger ID in a key made by LedgerKey.
func ParseLedgerKey(key string) (int64, bool) {
	if len(key) != len(LedgerKeyPrefix)+20 || key[:len(LedgerKeyPrefix)] != LedgerKeyPrefix {
		return 0, false
	}
	id, err := strconv.ParseInt(key[len(LedgerKeyPrefix):], 10, 64)
	return id, err == nil && id >= 0
}

// State is a ledger's life-cycle state.
type State string

// Ledger states.
const (
	StateOpen       State = "open"
	StateInRecovery State = "in-recovery"
	StateClosed     State = "closed"
)

// Segment is a run of entries written to one ensemble: from FirstEntry up
// to the next segment's FirstEntry-1 (or the end of the ledger).
type Segment struct {
	FirstEntry int64                 `json:"first_entry"`
	Ensemble   []topology.BookieInfo `json:"ensemble"`
}

// Metadata is a ledger's metadata as stored (JSON) under LedgerKey(ID).
type Metadata struct {
	ID          int64     `json:"id"`
	State       State     `json:"state"`
	Ensemble    int       `json:"ensemble_size"`
	WriteQuorum int       `json:"write_quorum"`
	AckQuorum   int       `json:"ack_quorum"`
	Segments    []Segment `json:"segments"`
	// LastEntry is the last entry ID once closed (-1 = empty); -1 while open.
	LastEntry int64 `json:"last_entry"`
	// Length is the payload bytes of entries 0..LastEntry when the writer
	// closed the ledger; -1 when recovery closed it (not known).
	Length int64 `json:"length"`
	// CreatedUnixMs is the creation time (client clock, informational).
	CreatedUnixMs int64             `json:"ctime_unix_ms"`
	Properties    map[string]string `json:"properties,omitempty"`

	// version is the store version the metadata was read at (CAS guard).
	version int64
}

// Version returns the metadata store version this copy was read at.
func (m *Metadata) Version() int64 { return m.version }

func (m *Metadata) clone() *Metadata {
	c := *m
	c.Segments = make([]Segment, len(m.Segments))
	for i, s := range m.Segments {
		c.Segments[i] = Segment{FirstEntry: s.FirstEntry, Ensemble: append([]topology.BookieInfo(nil), s.Ensemble...)}
	}
	if m.Properties != nil {
		c.Properties = make(map[string]string, len(m.Properties))
		for k, v := range m.Properties {
			c.Properties[k] = v
		}
	}
	return &c
}

// segmentFor returns the segment holding entry e.
func (m *Metadata) segmentFor(e int64) *Segment {
	for i := len(m.Segments) - 1; i > 0; i-- {
		if e >= m.Segments[i].FirstEntry {
			return &m.Segments[i]
		}
	}
	return &m.Segments[0]
}

// writeSet returns the ensemble positions entry e is written to.
func writeSet(e int64, ensemble, writeQuorum int) []int {
	ws := make([]int, writeQuorum)
	for i := range ws {
		ws[i] = int((e + int64(i)) % int64(ensemble))
	}
	return ws
}

func (m *Metadata) validate() error {
	if m.Ensemble < 1 || m.WriteQuorum < 1 || m.AckQuorum < 1 || m.Ensemble < m.WriteQuorum || m.WriteQuorum < m.AckQuorum {
		return fmt.Errorf("ledger %d: bad quorums E=%d Qw=%d Qa=%d", m.ID, m.Ensemble, m.WriteQuorum, m.AckQuorum)
	}
	if len(m.Segments) == 0 {
		return fmt.Errorf("ledger %d: no segments", m.ID)
	}
	for _, s := range m.Segments {
		if len(s.Ensemble) != m.Ensemble {
			return fmt.Errorf("ledger %d: segment at %d has %d bookies, want %d", m.ID, s.FirstEntry, len(s.Ensemble), m.Ensemble)
		}
	}
	switch m.State {
	case StateOpen, StateInRecovery, StateClosed:
	default:
		return fmt.Errorf("ledger %d: unknown state %q", m.ID, m.State)
	}
	return nil
}

// metaStore reads and CAS-writes ledger metadata.
type metaStore struct {
	store metadata.Store
}

func (s metaStore) get(ctx context.Context, id int64) (*Metadata, error) {
	kv, err := s.store.Get(ctx, LedgerKey(id), metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read metadata of %d: %w", id, err)
	}
	var m Metadata
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return nil, fmt.Errorf("ledger: decode metadata of %d: %w", id, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("ledger: bad metadata: %w", err)
	}
	m.version = kv.Version
	return &m, nil
}

// cas writes m if the stored version is still m.version (MustNotExist for a
// new ledger) and updates m.version. ErrUnknownOutcome is resolved by
// re-reading: if the stored value equals what was written, it succeeded.
func (s metaStore) cas(ctx context.Context, m *Metadata) error {
	val, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("ledger: encode metadata: %w", err)
	}
	kv, err := s.store.Put(ctx, LedgerKey(m.ID), val, m.version, 0)
	if errors.Is(err, metadata.ErrUnknownOutcome) {
		cur, gerr := s.store.Get(ctx, LedgerKey(m.ID), metadata.ReadOptions{})
		if gerr == nil && string(cur.Value) == string(val) {
			m.version = cur.Version
			return nil
		}
		if gerr == nil {
			return metadata.ErrVersionMismatch
		}
		return err
	}
	if err != nil {
		return err
	}
	m.version = kv.Version
	return nil
}

// idAllocator hands out ledger IDs from ranges reserved by CAS on
// LedgerIDCounterKey.
type idAllocator struct {
	store metadata.Store
	batch int64
	next  int64 // next ID to hand out
	end   int64 // end of the reserved range (exclusive)
}

type idCounter struct {
	Next int64 `json:"next"`
}

// allocate returns a fresh ledger ID. Callers serialise calls.
func (a *idAllocator) allocate(ctx context.Context) (int64, error) {
	if a.next < a.end {
		id := a.next
		a.next++
		return id, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var cur idCounter
		expect := metadata.MustNotExist
		kv, err := a.store.Get(ctx, LedgerIDCounterKey, metadata.ReadOptions{})
		switch {
		case err == nil:
			if err := json.Unmarshal(kv.Value, &cur); err != nil {
				return 0, fmt.Errorf("ledger: decode %s: %w", LedgerIDCounterKey, err)
			}
			expect = kv.Version
		case errors.Is(err, metadata.ErrNotFound):
		default:
			return 0, fmt.Errorf("ledger: read %s: %w", LedgerIDCounterKey, err)
		}
		val, _ := json.Marshal(idCounter{Next: cur.Next + a.batch})
		_, err = a.store.Put(ctx, LedgerIDCounterKey, val, expect, 0)
		if errors.Is(err, metadata.ErrVersionMismatch) || errors.Is(err, metadata.ErrUnknownOutcome) {
			// Someone else reserved a range (or our outcome is unknown: a
			// possibly reserved range is simply skipped). Retry.
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Millisecond):
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("ledger: reserve ledger IDs: %w", err)
		}
		a.next, a.end = cur.Next+1, cur.Next+a.batch
		return cur.Next, nil
	}
}
