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
// Memory bounds (issue 22):
//   - adds: the records queued for the journal and not yet written,
//     fsynced and answered hold at most max(Config.MaxQueuedAddBytes,
//     one record) bytes over the whole bookie (gauge
//     meridian_bookie_journal_queued_add_bytes); an add that does not fit
//     waits, then fails with ErrTooManyInFlight naming
//     max_queued_add_bytes. One AddEntries stream holds at most
//     max(Config.MaxInflightAddBytesPerStream, one payload) bytes of
//     unanswered adds, plus the request being read and gRPC's per-stream
//     flow-control window, because it stops reading beyond that (gauge
//     meridian_bookie_add_stream_inflight_bytes). Both use
//     internal/budget. Unary AddEntry calls are bounded by the journal
//     budget and max_streams_per_connection only.
//   - replay (replay.go, checkpoint.go) replays one journal file at a
//     time and never holds a payload: per file it allocates a 40-byte
//     header buffer, a payload-CRC buffer of at most replayChunk (1 MiB),
//     a resync window of at most replayChunk, and, in the last file, one
//     header and offset (under 64 bytes) per record with a bad CRC waiting
//     to be told torn from damaged; cutting a torn tail copies through a
//     1 MiB buffer. So replay's transient memory is at most about 2 MiB
//     plus 64 bytes per bad record of the last file, whatever the
//     headers announce (a length above maxRecordBytes is not a record).
//     The checkpoint is read whole (its file size) and decoded into at
//     most what its bytes can hold (every count is checked against the
//     bytes left before allocating). What replay builds is the index
//     itself: one location per stored entry, the bookie's steady-state
//     memory, not a replay cost.
//
// It does not replicate: quorum writes, ensembles and recovery live in the
// ledger client (bookie/ledger). See docs/ARCHITECTURE.md ("Bookie") for the design.
package bookie
