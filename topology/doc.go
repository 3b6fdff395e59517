// Package topology knows regions, racks and nodes: membership and failure
// detection with memberlist, and the ensemble placement policies
// (rack-aware, region-aware) that choose which bookies store a ledger.
// It does not store data or talk to bookies.
package topology
