// Package broker is the stateless server that owns topics: ownership,
// managed ledgers, cursors, subscriptions and dispatch, producers, the
// admin API and the client-facing gRPC service. It stores nothing itself;
// data lives on bookies and metadata in the metadata store.
package broker
