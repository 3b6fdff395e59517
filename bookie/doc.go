// Package bookie is Meridian's storage node: a journal with group commit
// that is also the entry log, an in-memory index checkpointed to disk,
// per-ledger fencing, garbage collection and the bookie gRPC service
// (api/bookie/v1).
//
// Invariants:
//   - an add is acknowledged only after its journal record is fdatasync'ed;
//     a failed write or fsync fails every add of its group and makes the
//     bookie read-only until restarted;
//   - the index never points at unsynced data, so reads never return an
//     entry that was not durable;
//   - a fence is persisted before it is answered, and every add ordered
//     after it (by the single journal goroutine) is refused unless it is a
//     recovery add;
//   - a stored entry whose CRC32C fails is reported corrupt, never missing;
//     damage found by replay, a read or the scrub never makes the bookie
//     read-only, and its ledgers are marked for repair (scrub.go);
//   - only the last journal file may end in a torn write; a bad record in
//     any other file is damage, and replay never trusts a record found by
//     scanning past damage (replay.go);
//   - a bookie serves only with matching cookies (cookie.go) in every data
//     directory and in metadata: a wiped or swapped disk refuses to start;
//   - a bookie answers only requests that name its ID and instance, and
//     its answers name them (identity.go);
//   - after a forced re-format it never answers "not found" for a ledger
//     its previous instance may have held, until autorecovery moved them
//     all (limbo.go): it answers "ledger unknown".
//
// It does not replicate: quorum writes, ensembles and recovery live in the
// ledger client (bookie/ledger). See docs/ARCHITECTURE.md ("Bookie") for the design.
package bookie
