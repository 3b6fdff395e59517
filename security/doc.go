// Package security owns Meridian's transport security and authentication:
// TLS material that reloads when its files change (tls.go, watch.go), the
// identity a call carries (identity.go), JWT tokens (token.go), the gRPC and
// HTTP glue every listener and dial uses (grpc.go, http.go), in-process
// connections that skip TLS with a fixed role (inprocess.go), the rule
// table type every service's authorizer is written in (authz.go), the
// gossip keyring file (gossip.go), the refusal to expose an unsecured
// listener (exposure.go) and the provisioning of a CA, certificates, a key
// and an admin token (pki.go). securitytest generates certificates for
// tests.
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
//   - Only a connection accepted by an InProcessListener (an in-memory
//     listener no socket reaches) skips the TLS handshake; it carries that
//     listener's role and nothing a peer sent can give it another.
//
// Lock order: there are no locks held across calls. Each reloader (TLS,
// Verifier) has a mutex that serializes its reloads only (the readers use
// the atomic pointer); a watcher's goroutine calls its reloader without
// holding anything of its own.
//
// It does not decide what an identity may do: each service's Authorizer
// does, from its own rule table (broker/authz.go, bookie/authz.go,
// metadata/authz.go; a method without a rule is refused). It does not mint
// tokens for users from a CLI either; it gives SignToken and the key
// generators that the CLI uses.
package security
