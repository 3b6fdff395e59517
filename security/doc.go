// Package security owns Meridian's transport security and authentication:
// TLS material that reloads when its files change (tls.go, watch.go), the
// identity a call carries (identity.go), JWT tokens (token.go), the gRPC and
// HTTP glue every listener and dial uses (grpc.go, http.go), the gossip
// keyring file (gossip.go) and the refusal to expose an unsecured listener
// (exposure.go). securitytest generates certificates for tests.
//
// Invariants:
//   - Material is swapped whole through an atomic.Pointer: a handshake or a
//     verification sees either the old or the new certificate, pool or key,
//     never a mix. New material that fails to parse is refused and the old
//     stays in use (logged, counted in
//     meridian_security_reload_failures_total).
//   - With TLS configured there is no plaintext fallback: a Runtime's
//     server options and dial options are TLS only.
//   - With auth enabled an anonymous call is refused with Unauthenticated
//     before any Authorizer sees it; a token is verified against a key of
//     a pinned algorithm family (alg "none" and HS256-with-a-public-key are
//     refused).
//   - With security off (no TLS, auth off) the options are plaintext and no
//     interceptor runs: behaviour is the same as without this package.
//
// Lock order: there are no locks held across calls. Each reloader (TLS,
// Verifier) has a mutex that serializes its reloads only (the readers use
// the atomic pointer); a watcher's goroutine calls its reloader without
// holding anything of its own.
//
// It does not decide what an identity may do: that is the Authorizer's
// job (phase 2 supplies the rule table; AllowAuthenticated is the
// placeholder). It does not mint tokens for users from a CLI either; it
// gives SignToken and the key generators that the CLI uses.
package security
