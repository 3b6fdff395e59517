package broker

import (
	"context"
	"fmt"

	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Producer names bound to roles (issue 21, section 5).
//
// Dedup trusts a producer name: a send under another producer's name with
// a huge sequence_id would make every later send of the real producer come
// back "duplicate", which the client counts as success. With security on,
// a topic binds each producer's dedup key (its name, or its failover
// identity key) to the authenticated role that first stored a batch under
// it; a producer of another role is refused under that name, at open
// (PermissionDenied) and at each send. The binding is kept with the
// producer's dedup state (dedupProducer.role), so it is bounded like it
// (broker.max_dedup_producers, LRU) and survives reloads: it is in the
// ledger list's dedup snapshot (dedupSnap.O) and in each stored entry
// (EntryMetadata.producer_role, found by the takeover scan). A name whose
// dedup state was forgotten is unbound again: its first user binds it, and
// the forgotten producer is refused visibly, never answered "duplicate".
// The error names the producer, never the role it belongs to. With
// security off nothing is bound. An anonymous caller (TLS without auth)
// binds nothing and is refused on a bound name.

// producerRole returns the role a producer opened with ctx is bound to
// ("" with security off or for an anonymous caller) and whether names are
// bound at all.
func (b *Server) producerRole(ctx context.Context) (string, bool) {
	if !b.replSecured() {
		return "", false
	}
	id := security.IdentityFrom(ctx)
	if id.Anonymous() {
		return "", true
	}
	return id.Role, true
}

// errProducerOtherRole is the refusal of a producer name bound to another
// role (the role is not named).
func errProducerOtherRole(name string, t TopicName) error {
	return fmt.Errorf("%w: permission denied: producer name %q on %s belongs to another role; use another producer name",
		ErrNotAllowed, name, t)
}

// producerBoundElsewhere reports whether dedup key name is bound to a role
// other than role.
func (ml *managedLedger) producerBoundElsewhere(name, role string) bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	p, ok := ml.dedup.byName[name]
	return ok && p.role != "" && p.role != role
}

// bindProducer binds dedup key name to role when it is tracked and
// unbound; it fails when the name is bound to another role.
func (ml *managedLedger) bindProducer(name, role string) bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	p, ok := ml.dedup.byName[name]
	if !ok {
		return true
	}
	if p.role == "" {
		p.role = role
		return true
	}
	return p.role == role
}

// checkProducerOpen refuses opening producer name (dedup key key) on t
// when the key is bound to another role than the caller's.
func (b *Server) checkProducerOpen(ctx context.Context, t *topic, name, key string) error {
	role, on := b.producerRole(ctx)
	if !on || !t.ml.producerBoundElsewhere(key, role) {
		return nil
	}
	b.log.Warn("producer refused: name bound to another role", "topic", t.name.String(), "producer", name)
	return status.Error(codes.PermissionDenied, errProducerOtherRole(name, t.name).Error())
}

// bindScanned binds dedup key name to role as found in a stored entry (a
// takeover scan), when it is not bound yet.
func (d *dedupTable) bindScanned(name, role string) {
	if role == "" {
		return
	}
	if p, ok := d.byName[name]; ok && p.role == "" {
		p.role = role
	}
}
