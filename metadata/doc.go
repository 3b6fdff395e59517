// Package metadata is Meridian's replicated metadata store: a Dragonboat
// state machine holding versioned keys with compare-and-set, prefix listing,
// ordered watches and sessions whose ephemeral keys vanish when the session
// ends. One node host runs the global shard and regional shards side by
// side. The package also has the gRPC service and the Go client.
//
// Invariants: every change is a Raft proposal; time inside the state machine
// comes only from proposals; reads are linearizable unless stale reads are
// asked for; a write that failed with anything but ErrUnknownOutcome was not
// applied. It does not know what the keys mean, and it does not change its
// membership at run time (replica sets come from configuration).
//
// Entry points: NewNode / StartEmbedded (a server hosting shards),
// Node.Store (in-process Store of one shard), NewClient (Store over gRPC),
// and metadatatest.Start / StartCluster for tests.
package metadata
