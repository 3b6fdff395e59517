package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// MaxStatusLedgers bounds the under-replicated ledgers Status lists; the
// count beyond it is still reported in Report.UnderReplicatedCount.
const MaxStatusLedgers = 10_000

// BookieStatus is one bookie as autorecovery sees it.
type BookieStatus struct {
	topology.BookieInfo
	// Live: the bookie is in the registry (ReadOnly then is its current
	// state). A bookie that is not live appears because it is
	// decommissioned or named by an under-replicated mark; its other
	// fields are then only what is known (ID at least).
	Live bool `json:"live"`
	// Decommissioned: an operator asked to drain it (Decommission).
	Decommissioned bool `json:"decommissioned"`
	// UnderReplicatedLedgers counts marks naming this bookie as missing.
	UnderReplicatedLedgers int `json:"under_replicated_ledgers"`
	// InstanceID is the instance its metadata cookie names ("" without
	// a cookie): it changes at every `meridian bookie format`.
	InstanceID string `json:"instance_id,omitempty"`
	// LimboBelowLedger > 0: the bookie was re-formatted and is in limbo
	// for the ledgers below it (it answers "unknown", not "not found").
	LimboBelowLedger int64 `json:"limbo_below_ledger,omitempty"`
	// LimboReason says why the limbo has not ended yet: the ledgers below
	// the bound that still list the bookie, and whether autorecovery has
	// a spare bookie to move them to. "" when not in limbo.
	LimboReason string `json:"limbo_reason,omitempty"`
}

// UnderReplicatedLedger is one under-replicated mark.
type UnderReplicatedLedger struct {
	LedgerID int64 `json:"ledger_id"`
	// Missing lists the lost bookie IDs.
	Missing []string `json:"missing"`
	// Corrupt lists the live bookies whose replica is damaged (MarkCorrupt).
	Corrupt []string `json:"corrupt,omitempty"`
	// Incomplete lists live bookies missing some entries of this ledger.
	Incomplete []string `json:"incomplete,omitempty"`
	// MarkedAt is when the auditor first marked the ledger.
	MarkedAt time.Time `json:"marked_at"`
	// Worker is the worker repairing it now, "" if none.
	Worker string `json:"worker,omitempty"`
}

// Report is the autorecovery state of a region.
type Report struct {
	// Bookies are the registered bookies plus the decommissioned ones and
	// the ones named by marks, sorted by ID.
	Bookies []BookieStatus `json:"bookies"`
	// UnderReplicated lists the marks in ledger order, at most
	// MaxStatusLedgers of them.
	UnderReplicated []UnderReplicatedLedger `json:"under_replicated"`
	// UnderReplicatedCount is the number of marks (all of them).
	UnderReplicatedCount int `json:"under_replicated_count"`
	// Paused and PausedReason reflect PausedKey.
	Paused       bool   `json:"paused"`
	PausedReason string `json:"paused_reason,omitempty"`
	// Auditor is the ID of the elected auditor, "" if none.
	Auditor string `json:"auditor,omitempty"`
}

// Status reads the region's autorecovery state from its metadata shard
// (linearizable reads; no auditor or worker needs to run in the caller).
func Status(ctx context.Context, store metadata.Store) (Report, error) {
	var r Report
	var err error
	if r.Paused, r.PausedReason, err = paused(ctx, store); err != nil {
		return Report{}, err
	}
	kv, err := store.Get(ctx, AuditorKey, metadata.ReadOptions{})
	switch {
	case err == nil:
		var v auditorValue
		if json.Unmarshal(kv.Value, &v) == nil {
			r.Auditor = v.ID
		}
	case !errors.Is(err, metadata.ErrNotFound):
		return Report{}, fmt.Errorf("autorecovery: read %s: %w", AuditorKey, err)
	}
	live, err := registry(ctx, store)
	if err != nil {
		return Report{}, err
	}
	decom, err := decommissioned(ctx, store)
	if err != nil {
		return Report{}, err
	}
	locks := map[int64]string{}
	err = listAll(ctx, store, LockPrefix, 0, func(kv metadata.KV) error {
		if id, ok := parseIDKey(LockPrefix, kv.Key); ok {
			var v lockValue
			_ = json.Unmarshal(kv.Value, &v)
			locks[id] = v.Worker
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	missingCount := map[string]int{}
	err = listAll(ctx, store, UnderReplicatedPrefix, 0, func(kv metadata.KV) error {
		id, ok := parseIDKey(UnderReplicatedPrefix, kv.Key)
		if !ok {
			return nil
		}
		r.UnderReplicatedCount++
		m, _ := decodeMark(kv)
		for _, b := range m.Missing {
			missingCount[b]++
		}
		if len(r.UnderReplicated) < MaxStatusLedgers {
			r.UnderReplicated = append(r.UnderReplicated, UnderReplicatedLedger{
				LedgerID: id, Missing: m.Missing, Corrupt: m.Corrupt, Incomplete: m.Incomplete, MarkedAt: time.UnixMilli(m.MarkedUnixMs), Worker: locks[id],
			})
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	byID := map[string]*BookieStatus{}
	get := func(id string) *BookieStatus {
		if b := byID[id]; b != nil {
			return b
		}
		b := &BookieStatus{BookieInfo: topology.BookieInfo{ID: id}}
		byID[id] = b
		return b
	}
	for id, info := range live {
		b := get(id)
		b.BookieInfo, b.Live = info, true
	}
	for id := range decom {
		get(id).Decommissioned = true
	}
	for id, n := range missingCount {
		get(id).UnderReplicatedLedgers = n
	}
	if err := addLimbo(ctx, store, byID); err != nil {
		return Report{}, err
	}
	for _, b := range byID {
		r.Bookies = append(r.Bookies, *b)
	}
	sort.Slice(r.Bookies, func(i, j int) bool { return strings.Compare(r.Bookies[i].ID, r.Bookies[j].ID) < 0 })
	return r, nil
}

// addLimbo fills the instance and limbo fields of the listed bookies from
// their metadata cookies. Only when some bookie is in limbo does it scan
// the ledger metadata, to say why the limbo lasts: a limbo ends when no
// ledger below its bound lists the bookie's old instance (bookie/limbo.go).
// Autorecovery moves a replica to a writable bookie outside the ensemble;
// with none (exactly E bookies) it rebuilds the replica on the bookie's
// new instance (instance.go), which needs the bookie registered and
// writable.
func addLimbo(ctx context.Context, store metadata.Store, byID map[string]*BookieStatus) error {
	limbo := map[string]int64{}
	instance := map[string]string{}
	err := listAll(ctx, store, bookie.CookieKeyPrefix, 0, func(kv metadata.KV) error {
		var c bookie.Cookie
		if json.Unmarshal(kv.Value, &c) != nil {
			return nil // refused by the bookie itself at start; nothing to show
		}
		b := byID[strings.TrimPrefix(kv.Key, bookie.CookieKeyPrefix)]
		if b == nil {
			return nil
		}
		b.InstanceID = c.InstanceID
		if c.LimboBelowLedger > 0 {
			b.LimboBelowLedger = c.LimboBelowLedger
			limbo[b.ID] = c.LimboBelowLedger
			instance[b.ID] = c.InstanceID
		}
		return nil
	})
	if err != nil || len(limbo) == 0 {
		return err
	}
	// Spares are writable live bookies that are not decommissioned.
	var writable []string
	for id, b := range byID {
		if b.Live && !b.ReadOnly && !b.Decommissioned {
			writable = append(writable, id)
		}
	}
	listing, stuck := map[string]int{}, map[string]int{}
	err = listAll(ctx, store, ledger.LedgerKeyPrefix, 0, func(kv metadata.KV) error {
		var md ledger.Metadata
		if json.Unmarshal(kv.Value, &md) != nil {
			return nil
		}
		for id, below := range limbo {
			if md.ID >= below {
				continue
			}
			for _, sg := range md.Segments {
				in, old := map[string]bool{}, false
				for _, e := range sg.Ensemble {
					in[e.ID] = true
					old = old || (e.ID == id && e.InstanceID != instance[id])
				}
				if !old {
					continue // not listed, or already rebuilt on the new instance
				}
				listing[id]++
				spare := false
				for _, w := range writable {
					spare = spare || !in[w]
				}
				if !spare {
					stuck[id]++
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for id, below := range limbo {
		b := byID[id]
		switch n := listing[id]; {
		case n == 0:
			b.LimboReason = fmt.Sprintf("no ledger below %d lists it any more: the bookie ends its limbo at its next check", below)
		case stuck[id] > 0 && (!b.Live || b.ReadOnly):
			b.LimboReason = fmt.Sprintf("re-formatted: %d ledger(s) below %d still list its old instance; %d of them have no spare bookie (every writable bookie is in their ensemble) and the bookie is not registered writable, so autorecovery cannot rebuild them: start the bookie or add one",
				n, below, stuck[id])
		case stuck[id] > 0:
			b.LimboReason = fmt.Sprintf("re-formatted: %d ledger(s) below %d still list its old instance; %d of them have no spare bookie, so autorecovery rebuilds those replicas on this bookie's new instance (is autorecovery paused or failing? see bookies status)",
				n, below, stuck[id])
		default:
			b.LimboReason = fmt.Sprintf("re-formatted: %d ledger(s) below %d still list its old instance; autorecovery is moving their replicas to spare bookies", n, below)
		}
	}
	return nil
}
