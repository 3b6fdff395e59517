package broker

import (
	"context"
	"fmt"
	"slices"

	"github.com/meridianmq/meridian/security"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Replication identities (issue 21, section 4; docs/security/replication.md).
//
// With security on, each region's replicator and subscription sender dial
// with the broker's component certificate, CN broker.<region> (phase 1's
// DialOptions), and a receiver accepts:
//
//   - a stream (Replicate, ReplicateSubscriptions) only when its
//     source_region is the region the caller authenticated as
//     (security.ParseComponent: kind broker) and is in the topic's
//     replication set; otherwise the stream is refused with
//     PermissionDenied before the topic is loaded;
//   - a direct entry (origin_region == source_region) from that stream;
//   - a relayed entry (origin_region != source_region) only when both the
//     source and the origin are in the topic's replication set (effective
//     policies, ReplicationRegions), read once per request outside the
//     receive lock; otherwise the entry is REJECTED (NOT_ALLOWED, naming
//     origin_region and the rule) and nothing of it, or after it in the
//     request, is stored;
//   - in a subscription update, vector origins, scoped claims and the
//     reset region only of regions in the replication set.
//
// With security off nothing is checked, as before.

// replSecured reports whether the receiver checks replication identities.
func (b *Server) replSecured() bool { return b.sec != nil && !b.sec.Config().Off() }

// checkReplCaller refuses a replication stream whose caller is not
// broker.<source> (nil with security off).
func (b *Server) checkReplCaller(ctx context.Context, source string) error {
	if !b.replSecured() {
		return nil
	}
	id := security.IdentityFrom(ctx)
	kind, region, ok := security.ParseComponent(id.Role)
	if !id.Anonymous() && ok && kind == security.KindBroker && region == source {
		return nil
	}
	caller := "anonymous"
	if !id.Anonymous() {
		caller = fmt.Sprintf("%q", id.Role)
	}
	return status.Errorf(codes.PermissionDenied,
		"replication stream refused: source_region %q must be the region the caller authenticated as (role %q); the caller is %s",
		source, security.ComponentRole(security.KindBroker, source), caller)
}

// replSet returns the topic's replication regions for the identity checks
// (nil, nil with security off).
func (b *Server) replSet(ctx context.Context, name TopicName) ([]string, error) {
	if !b.replSecured() {
		return nil, nil
	}
	regions, err := b.ReplicationRegions(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: replication regions of %s unreadable, replication identities not checked: %v", ErrUnavailable, name, err)
	}
	if regions == nil {
		regions = []string{} // not nil: checked, and empty
	}
	return regions, nil
}

// checkReplSourceInSet refuses a stream from a region outside the topic's
// replication set (nil with security off).
func (b *Server) checkReplSourceInSet(ctx context.Context, name TopicName, source string) error {
	set, err := b.replSet(ctx, name)
	if err != nil {
		return err
	}
	if set != nil && !slices.Contains(set, source) {
		return status.Errorf(codes.PermissionDenied,
			"replication stream refused: source_region %q is not a replication region of %s", source, name)
	}
	return nil
}

// checkReplEntry applies the entry rule with the request's replication
// set (nil: security off, nothing checked).
func checkReplEntry(set []string, name TopicName, source, origin string) error {
	if set == nil {
		return nil
	}
	if origin == source {
		if !slices.Contains(set, source) {
			return fmt.Errorf("%w: origin_region %q: a direct entry is accepted only from a replication region of %s, and %q is not one",
				ErrNotAllowed, origin, name, source)
		}
		return nil
	}
	if !slices.Contains(set, source) || !slices.Contains(set, origin) {
		return fmt.Errorf("%w: origin_region %q relayed by %q: a relayed entry is accepted only when both its origin and the relaying region are replication regions of %s",
			ErrNotAllowed, origin, source, name)
	}
	return nil
}

// checkSubUpdateRegions refuses a subscription update naming regions
// outside the replication set (nil set: security off).
func checkSubUpdateRegions(set []string, name TopicName, field string, v ackVector, resetRegion string) error {
	if set == nil {
		return nil
	}
	for key := range v {
		claimer, stream, scoped := splitScoped(key)
		if !scoped {
			stream = key
		}
		origin, _ := splitOriginStream(stream)
		if !slices.Contains(set, origin) {
			return fmt.Errorf("%w: %s.vector: origin_region %q is not a replication region of %s: acknowledgements are accepted only for the entries of replication regions",
				ErrNotAllowed, field, origin, name)
		}
		if scoped && !slices.Contains(set, claimer) {
			return fmt.Errorf("%w: %s.vector.scoped: region %q is not a replication region of %s: claims are accepted only from replication regions",
				ErrNotAllowed, field, claimer, name)
		}
	}
	if resetRegion != "" && !slices.Contains(set, resetRegion) {
		return fmt.Errorf("%w: %s.reset_region %q is not a replication region of %s", ErrNotAllowed, field, resetRegion, name)
	}
	return nil
}
