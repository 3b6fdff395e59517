// Package topology knows regions, racks and nodes: membership and failure
// detection with memberlist, the bookie registry view, and the ensemble
// placement policies (rack-aware, region-aware) that choose which bookies
// store a ledger.
//
// Invariants: placement never returns a read-only, excluded or duplicate
// bookie; in enforce mode every write quorum (Qw consecutive ensemble
// members, wrapping) of a returned ensemble spans the configured number of
// racks (RackAware) or regions (RegionAware), otherwise the error wraps
// ErrNotEnoughBookies; in best-effort mode the spread is the best the
// search finds and shortfalls are counted in
// meridian_placement_adherence_failures_total. Racks are told apart by
// region and rack together (RackKey).
//
// It does not store data, talk to bookies, or register bookies (the bookie
// does that); it only reads the registry.
package topology
