// Package autorecovery restores the replica count of closed ledgers that
// lost a bookie, in the manner of BookKeeper's auditor and replication
// workers.
//
// The Auditor (one active per region, elected through an ephemeral key under
// a metadata session) watches the bookie registry. A bookie that has been
// missing from the registry for longer than Config.LostBookieDelay, or that
// an operator decommissioned, is "lost": the auditor scans ledger metadata
// and writes an under-replicated mark (UnderReplicatedKey) naming the lost
// bookies for every CLOSED ledger with a lost bookie in one of its
// ensembles.
//
// Workers (any number, in bookie processes or standalone) claim a marked
// ledger with an ephemeral lock, choose a replacement with the placement
// policy, copy every entry the lost bookie held in the affected segment from
// a surviving replica to the replacement (recovery adds, durable before they
// are answered), then swap the bookie in the segment's ensemble by
// compare-and-set on the ledger metadata, and finally delete the mark
// (guarded by its version, so a mark the auditor extended meanwhile is
// processed again).
//
// Invariants: the metadata never names a bookie for a segment before that
// bookie holds every entry of the segment it is responsible for; every step
// is idempotent, so a worker that dies at any point leaves a state the next
// worker completes. Open and in-recovery ledgers are not touched: the writer's
// ensemble change and ledger recovery own them.
//
// A re-formatted bookie in limbo with no spare bookie to replace it (exactly
// E bookies) gets its replicas rebuilt on its own new instance: the same
// copy, then the swap records the new instance in the ensemble place, which
// then counts as rebuilt (instance.go).
//
// A live bookie whose replica is damaged (its scrub or a read found corrupt
// entries) is named in the mark's Corrupt list by MarkCorrupt; a worker
// rewrites that replica in place from healthy ones before anything else.
//
// What it does not do: it does not delete the orphan copies a crashed worker
// may leave on a replacement it never recorded, it does not check replicas
// of live bookies for missing entries (no fragment checker), and it does not
// move entries to rebalance racks.
//
// Pause (PausedKey) stops both the auditor's marking and the workers'
// copying for maintenance; Status reports bookies, marks and the pause flag
// for `meridian admin bookies`.
package autorecovery
