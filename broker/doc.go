// Package broker is the stateless server that owns topics: ownership,
// managed ledgers, cursors, subscriptions and dispatch, producers, the
// admin API and the client-facing gRPC service. It stores nothing itself;
// data lives on bookies and metadata in the metadata store.
//
// Invariants:
//   - A producer is acknowledged only after its entry is durable on the
//     ledger's ack quorum (the LedgerWriter callback), never before.
//   - A broker accepts writes for a topic only after it claimed the topic
//     (ephemeral key under its metadata session) and recovered — fenced —
//     every ledger the previous owner may still write to, and recorded its
//     own new ledger with compare-and-set on the topic's ledger list.
//   - Any add failure, or a compare-and-set mismatch on the ledger list or
//     a cursor, unloads the topic. A new owner fences every key it takes
//     over (the ledger list by recording its ledger, each cursor by
//     rewriting it with compare-and-set as it loads it), so a broker that
//     lost a topic (a "zombie") can neither add entries nor change its
//     metadata.
//   - The cursor writes of one subscription are serialized: a version
//     mismatch means another broker wrote, never this one racing itself.
//   - Acknowledgements move cursors in memory and are persisted every
//     cursor persist interval (namespace policy, else
//     CursorPersistInterval), on graceful close and on a non-graceful
//     unload while the broker still owns the topic: a crash redelivers at
//     most the acknowledgements of one interval, never loses a message.
//     With an interval of 0 an ack is answered only once persisted.
//   - Retention deletes only whole closed ledgers that every cursor passed
//     and that are outside the namespace retention (time and size).
//
// It does not replicate across regions (package replicator), batch or
// compress messages (the client does), or choose bookies (topology and the
// ledger client do).
package broker
