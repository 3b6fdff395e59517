// Package ledger is the ledger client brokers use to write and read ledgers
// on bookies (DESIGN §3).
//
// A ledger is an append-only sequence of entries 0, 1, 2, ... written by one
// Writer. Its metadata (state, E/Qw/Qa, the ensemble segments, the last
// entry once closed) lives in the region's metadata shard under
// LedgerKey(id) and every change is a compare-and-set, so a writer, a
// recoverer and a deleter never overwrite each other's decisions.
//
// Invariants:
//   - entry e is sent to the Qw bookies at ensemble positions e mod E ..
//     (e+Qw-1) mod E of the segment that contains e, and is reported added
//     only after Qa of them confirmed it durably and every earlier entry was
//     reported added; callbacks run in entry order;
//   - on a bookie failure the Writer replaces the bookie (an ensemble change:
//     a new segment starting at the first entry not yet reported added,
//     recorded by CAS) and resends; a reported entry is never lost;
//   - a "fenced" answer from any bookie ends the Writer with ErrLedgerFenced;
//     the Writer never changes ensemble around a fence;
//   - OpenRecover fences the last segment's bookies, finds the last entry
//     that can have been reported added, re-replicates the tail and closes
//     the ledger there; concurrent recoveries converge by CAS.
//
// It does not re-replicate closed ledgers after a bookie loss (that is
// autorecovery) and does not trim ledgers (the managed ledger does).
package ledger
