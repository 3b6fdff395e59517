package topology

import "errors"

// BookieRegistryPrefix is the key prefix, in a region's metadata shard, under
// which each live bookie registers itself as an ephemeral key
// BookieRegistryPrefix+ID whose value is the JSON encoding of BookieInfo.
const BookieRegistryPrefix = "bookies/"

// BookieInfo describes one bookie as placement sees it.
type BookieInfo struct {
	// ID is the bookie's stable identity (survives restarts).
	ID string `json:"id"`
	// Address is the bookie's gRPC address, host:port.
	Address string `json:"address"`
	// Region and Rack are the bookie's failure domains.
	Region string `json:"region"`
	Rack   string `json:"rack"`
	// ReadOnly is true when the bookie refuses adds (disk full, I/O error,
	// maintenance); placement never chooses it for new writes.
	ReadOnly bool `json:"read_only"`
	// ReadOnlyReason says why the bookie is read-only (registry only;
	// empty when writable).
	ReadOnlyReason string `json:"read_only_reason,omitempty"`
	// InstanceID is the instance UUID of the bookie's cookie (new after
	// every re-format; see bookie/cookie.go). Clients send it with every
	// request and a bookie answers only to its own. Empty in registrations
	// and ledger metadata written before cookies existed.
	InstanceID string `json:"instance_id,omitempty"`
}

// ErrNotEnoughBookies is returned (wrapped, with the numbers) when there are
// too few live, writable bookies, or too few racks in enforce mode, to
// satisfy a placement request.
var ErrNotEnoughBookies = errors.New("topology: not enough bookies")

// Placement chooses ensembles for ledgers. Implementations are safe for
// concurrent use and never choose a ReadOnly bookie or one in exclude.
type Placement interface {
	// NewEnsemble picks ensembleSize distinct bookies from candidates such
	// that every write quorum (writeQuorum consecutive members, wrapping)
	// satisfies the policy. The order of the result is the ensemble order.
	NewEnsemble(ensembleSize, writeQuorum, ackQuorum int, candidates []BookieInfo, exclude map[string]bool) ([]BookieInfo, error)
	// ReplaceBookie picks a bookie to take position index of ensemble,
	// keeping the policy for every write quorum that contains the position.
	ReplaceBookie(ensemble []BookieInfo, writeQuorum, index int, candidates []BookieInfo, exclude map[string]bool) (BookieInfo, error)
}
