// Package netguard bounds what one peer can hold open on a server before
// and after it authenticates: connections per remote IP (connlimit.go),
// the per-connection limits of a gRPC server (grpc.go: message size,
// concurrent streams, header list size, keepalive enforcement, idle
// connections) and the timeouts and sizes of an HTTP server (http.go).
// The broker, the bookie and the metadata node take their values from one
// Limits struct embedded in their configs (limits.go), so the three
// servers share the defaults and the validation.
//
// Invariants:
//   - A connection refused for its remote IP is closed before any byte of
//     it is read (before a TLS handshake) and counted in
//     meridian_server_connections_refused_total{server, listener, reason};
//     the label values are fixed strings chosen by the caller, never a
//     peer's address.
//   - The per-IP table holds one entry per remote IP with at least one
//     open connection: an entry is removed when its count returns to
//     zero, so the table is no larger than the set of open connections.
//   - A connection's count is released exactly once, however many times
//     Close is called.
//
// It does not authenticate (package security does) and does not bound
// what happens inside a stream (queues, in-flight bytes: each service
// bounds its own).
package netguard
