package security

import (
	"context"
	"strings"
)

// Authentication methods of an Identity.
const (
	// MethodToken: the caller presented a verified JWT; Role is its sub.
	MethodToken = "token"
	// MethodTLS: the caller presented a verified client certificate; Role is
	// its subject's common name.
	MethodTLS = "tls"
	// MethodInProcess: the caller is a component of this process that
	// dialed an in-memory listener (InProcessListener); Role is the one
	// that listener was given.
	MethodInProcess = "inprocess"
	// MethodNone: the caller is anonymous.
	MethodNone = ""
)

// Identity is who made a call, as authenticated by the Runtime.
type Identity struct {
	// Role is the principal ("" when anonymous): a token's sub or a
	// certificate's CN. Components are "<kind>.<region>" (ComponentRole).
	Role string
	// Method is how Role was established: MethodToken, MethodTLS or
	// MethodNone (anonymous).
	Method string
}

// Anonymous reports whether the identity carries no authenticated role.
func (id Identity) Anonymous() bool { return id.Method == MethodNone || id.Role == "" }

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity in ctx (anonymous when none).
func IdentityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// Component kinds: the first part of a component's role.
const (
	KindBroker       = "broker"
	KindBookie       = "bookie"
	KindAutorecovery = "autorecovery"
	KindMetadata     = "metadata"
)

// ComponentRole returns the role a component of kind in region
// authenticates as, "<kind>.<region>" (e.g. "broker.a"). A region's
// replication streams are authenticated as ComponentRole(KindBroker, region).
func ComponentRole(kind, region string) string { return kind + "." + region }

// ParseComponent splits a component role into its kind and region; ok is
// false when role is not "<kind>.<region>" with a known kind and a
// non-empty region.
func ParseComponent(role string) (kind, region string, ok bool) {
	kind, region, found := strings.Cut(role, ".")
	if !found || region == "" {
		return "", "", false
	}
	switch kind {
	case KindBroker, KindBookie, KindAutorecovery, KindMetadata:
		return kind, region, true
	}
	return "", "", false
}
