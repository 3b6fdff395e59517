// Package bookie is Meridian's storage node: a journal with group commit,
// entry storage with an index, per-ledger fencing, garbage collection and
// the bookie gRPC service. A bookie acknowledges an add only after the entry
// is fsynced in its journal.
package bookie
