package security

import (
	"context"
	"fmt"
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

// CheckCertificateRole fails when this runtime's certificate is not that
// of a component of kind in region ("" : any region): a component started
// with another's certificate (a bookie's on a broker, region b's in region
// a) would be refused by its peers, or act as what it is not. field names
// the config field of the certificate in the error. No certificate (TLS
// off, or a CA only): nil.
func (rt *Runtime) CheckCertificateRole(field, kind, region string) error {
	if rt == nil || rt.tls == nil {
		return nil
	}
	m := rt.tls.cur.Load()
	if m == nil || m.cert == nil || m.cert.Leaf == nil {
		return nil
	}
	cn := m.cert.Leaf.Subject.CommonName
	k, r, ok := ParseComponent(cn)
	if ok && k == kind && (region == "" || r == region) {
		return nil
	}
	want := ComponentRole(kind, region)
	if region == "" {
		want = kind + ".<region>"
	}
	return fmt.Errorf("%s: the certificate's subject CN is %q; a %s must present %q", field, cn, kind, want)
}
