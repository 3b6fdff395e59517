// Package client is the Go client library for Meridian: producers,
// consumers and the admin client, with lookup, reconnect and back-pressure.
//
// A Client connects to any broker of a region (Options.URL). Producers and
// consumers look their topic's owner up on every (re)connect, reconnect with
// exponential backoff when a stream breaks or the topic moves, and never
// cache an owner.
//
// Invariants:
//   - Producer: every message accepted by SendAsync is resolved exactly
//     once (callback with its MessageID or an error). Accepted messages are
//     bounded by ProducerOptions.MaxPendingMessages. Sequence IDs increase
//     by one per accepted message; a batch is resent after a reconnect with
//     the same sequence IDs, so the broker can drop duplicates. ErrSendTimeout
//     and a Send whose ctx ended are unknown outcomes: the message may have
//     been stored.
//   - Consumer: at-least-once delivery. The client buffers at most
//     ReceiverQueueSize entries. Ack returns nil only after the broker
//     applied it; a batch's entry is acknowledged on the broker once all of
//     its messages are.
//   - Every blocking call takes a context.Context; errors wrap the
//     package's sentinels (errors.Is) and broker errors are *ServerError.
//
// What it does not do: multi-region failover, readers and seek (coming with
// geo-replication), partitioned topics, key-shared subscriptions.
package client
