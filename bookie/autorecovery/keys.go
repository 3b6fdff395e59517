package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Metadata keys in the region's shard. They live beside the ledger metadata
// (ledger.LedgerKeyPrefix) and the bookie registry
// (topology.BookieRegistryPrefix).
const (
	// AuditorKey is the ephemeral key the elected auditor holds under its
	// session; its value is JSON {"id":..., "since_unix_ms":...}.
	AuditorKey = "autorecovery/auditor"
	// PausedKey, while it exists, pauses the auditor's marking and the
	// workers' re-replication (JSON {"reason":..., "unix_ms":...}).
	PausedKey = "autorecovery/paused"
	// DecommissionedPrefix + bookie ID marks a bookie for draining: its
	// closed ledgers are re-replicated elsewhere at once, live or not.
	DecommissionedPrefix = "autorecovery/decommissioned/"
	// LockPrefix + 20-digit ledger ID is a worker's ephemeral claim on an
	// under-replicated ledger.
	LockPrefix = "autorecovery/locks/"
	// UnderReplicatedPrefix + 20-digit ledger ID marks a closed ledger that
	// has lost bookies (JSON Mark). Persistent: it survives auditor and
	// worker restarts until a worker resolves it.
	UnderReplicatedPrefix = "underreplicated/"
)

// MaxBookieIDBytes bounds a bookie ID given to Decommission.
const MaxBookieIDBytes = 256

// UnderReplicatedKey returns the mark key of a ledger: the ID zero-padded to
// 20 digits, like ledger keys, so marks list in ledger order.
func UnderReplicatedKey(ledgerID int64) string {
	return fmt.Sprintf("%s%020d", UnderReplicatedPrefix, ledgerID)
}

// LockKey returns the worker lock key of a ledger.
func LockKey(ledgerID int64) string { return fmt.Sprintf("%s%020d", LockPrefix, ledgerID) }

func parseIDKey(prefix, key string) (int64, bool) {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id >= 0
}

// Mark is the value of an under-replicated mark.
type Mark struct {
	LedgerID int64 `json:"ledger_id"`
	// Missing lists the lost bookie IDs, sorted, without duplicates.
	Missing []string `json:"missing"`
	// MarkedUnixMs is when the auditor first marked the ledger.
	MarkedUnixMs int64 `json:"marked_unix_ms"`
	// Auditor is the ID of the auditor that last changed the mark.
	Auditor string `json:"auditor,omitempty"`
	// Corrupt lists, sorted, the live bookies whose replica of the ledger
	// is damaged (MarkCorrupt): a worker rewrites their replica in place
	// from healthy ones.
	Corrupt []string `json:"corrupt,omitempty"`
	// Incomplete lists live bookies (sorted, no duplicates) found missing
	// entries of their write sets; a worker fills those in place.
	Incomplete []string `json:"incomplete,omitempty"`
}

func decodeMark(kv metadata.KV) (Mark, error) {
	var m Mark
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return Mark{}, fmt.Errorf("autorecovery: decode %s: %w", kv.Key, err)
	}
	return m, nil
}

type pauseValue struct {
	Reason string `json:"reason,omitempty"`
	UnixMs int64  `json:"unix_ms"`
}

// Pause stops autorecovery in the region until Resume: the auditor marks
// nothing and workers start no copy (a segment copy already running
// finishes). reason is free text shown by Status (at most 1024 bytes).
// Pausing a paused region updates the reason.
func Pause(ctx context.Context, store metadata.Store, reason string) error {
	if len(reason) > 1024 {
		return fmt.Errorf("%w: reason is %d bytes, limit 1024", ErrInvalidArgument, len(reason))
	}
	val, _ := json.Marshal(pauseValue{Reason: reason, UnixMs: time.Now().UnixMilli()})
	if _, err := store.Put(ctx, PausedKey, val, metadata.AnyVersion, 0); err != nil {
		return fmt.Errorf("autorecovery: pause: %w", err)
	}
	return nil
}

// Resume ends a pause; resuming a region that is not paused succeeds.
func Resume(ctx context.Context, store metadata.Store) error {
	err := store.Delete(ctx, PausedKey, metadata.AnyVersion)
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("autorecovery: resume: %w", err)
	}
	return nil
}

// paused reads the pause flag and its reason.
func paused(ctx context.Context, store metadata.Store) (bool, string, error) {
	kv, err := store.Get(ctx, PausedKey, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("autorecovery: read %s: %w", PausedKey, err)
	}
	var p pauseValue
	_ = json.Unmarshal(kv.Value, &p) // a bad value still pauses
	return true, p.Reason, nil
}

func validateBookieID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: bookie ID is empty", ErrInvalidArgument)
	case len(id) > MaxBookieIDBytes:
		return fmt.Errorf("%w: bookie ID is %d bytes, limit %d", ErrInvalidArgument, len(id), MaxBookieIDBytes)
	case strings.ContainsAny(id, "/\x00"):
		return fmt.Errorf("%w: bookie ID %q contains '/' or NUL", ErrInvalidArgument, id)
	}
	return nil
}

// Decommission marks a bookie for draining: the auditor marks every closed
// ledger that uses it without waiting for LostBookieDelay, and workers move
// those replicas to other bookies (reading from the bookie itself when no
// other replica answers). The bookie may keep running; new ledgers still
// may choose it until it is stopped or made read-only.
func Decommission(ctx context.Context, store metadata.Store, bookieID string) error {
	if err := validateBookieID(bookieID); err != nil {
		return err
	}
	val, _ := json.Marshal(pauseValue{UnixMs: time.Now().UnixMilli()})
	if _, err := store.Put(ctx, DecommissionedPrefix+bookieID, val, metadata.AnyVersion, 0); err != nil {
		return fmt.Errorf("autorecovery: decommission %s: %w", bookieID, err)
	}
	return nil
}

// Recommission withdraws a Decommission; ledgers already moved stay moved.
func Recommission(ctx context.Context, store metadata.Store, bookieID string) error {
	if err := validateBookieID(bookieID); err != nil {
		return err
	}
	err := store.Delete(ctx, DecommissionedPrefix+bookieID, metadata.AnyVersion)
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("autorecovery: recommission %s: %w", bookieID, err)
	}
	return nil
}

// listAll calls fn for every key with the prefix, page by page.
func listAll(ctx context.Context, store metadata.Store, prefix string, pageSize int, fn func(metadata.KV) error) error {
	page := metadata.Page{Limit: pageSize}
	for {
		res, err := store.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return fmt.Errorf("autorecovery: list %s: %w", prefix, err)
		}
		for _, kv := range res.KVs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !res.More || len(res.KVs) == 0 {
			return nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}

// registry reads the live bookies (registered under topology.BookieRegistryPrefix).
func registry(ctx context.Context, store metadata.Store) (map[string]topology.BookieInfo, error) {
	live := map[string]topology.BookieInfo{}
	err := listAll(ctx, store, topology.BookieRegistryPrefix, 0, func(kv metadata.KV) error {
		var b topology.BookieInfo
		if err := json.Unmarshal(kv.Value, &b); err != nil || b.ID == "" {
			return nil // a bad registration is not a live bookie
		}
		live[b.ID] = b
		return nil
	})
	return live, err
}

// decommissioned reads the decommissioned bookie IDs.
func decommissioned(ctx context.Context, store metadata.Store) (map[string]bool, error) {
	out := map[string]bool{}
	err := listAll(ctx, store, DecommissionedPrefix, 0, func(kv metadata.KV) error {
		out[strings.TrimPrefix(kv.Key, DecommissionedPrefix)] = true
		return nil
	})
	return out, err
}

// sortedUnion returns a ∪ b sorted, and whether it differs from a.
func sortedUnion(a, b []string) ([]string, bool) {
	set := make(map[string]bool, len(a)+len(b))
	for _, s := range a {
		set[s] = true
	}
	changed := false
	for _, s := range b {
		if !set[s] {
			set[s] = true
			changed = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, changed
}
