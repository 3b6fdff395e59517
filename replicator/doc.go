// Package replicator streams the entries of one topic to one remote region
// (DESIGN §6). The broker that owns the topic runs one Replicator per
// remote region; each reads the topic through its own durable cursor
// (`meridian.repl.<region>`, an ordinary cursor of the topic, so retention
// never deletes what it has not shipped) and ships entries as stored over
// the Replication gRPC service.
//
// Invariants:
//   - The cursor advances only over the longest prefix of the log whose
//     entries the remote answered PERSISTED, DUPLICATE or GAP, or that need
//     no sending (origin is the remote, an entry the remote already
//     applied), or that are not for the remote (the remote is not among the
//     entry's targets, replication disabled) and were reported as such
//     (ReplicateEntries.skipped) in a request the remote answered.
//     A relayed entry whose origin the remote reaches directly is not sent
//     but waits until the remote's applied position passes it (or is sent
//     after all if the origin's direct stream goes). A REJECTED entry and
//     everything after it count as not replicated.
//   - Per origin, entries are sent in log order; the receiver applies them
//     idempotently by (origin region, origin_seq), so every resend after a
//     reconnect, crash or ownership move is harmless.
//   - An entry whose origin is the remote is never sent back to it.
//
// The package does not know broker internals: the broker implements Source
// (read, mark-delete, backlog) and gives a Connector that finds and dials
// the remote owner (Dialer does that over gRPC with the broker's dial
// rewrite). It does not apply entries: that is the receiving broker's job.
//
// The protocol core (pipeline.go: what to send, window, acknowledgement
// handling) is a plain type without goroutines or clocks; replicator.go is
// the shell that does the I/O.
package replicator
