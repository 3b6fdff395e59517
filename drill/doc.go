// Package drill runs a failover drill against a `meridian dev` cluster and
// measures what a move between regions costs: RTO, RPO, duplicates, loss
// and latency.
//
// A drill runs a workload (producers and consumers of a replicated
// subscription) in one region, injects a fault there through the dev
// cluster's control API (kill every process of the region, cut its links,
// pause its brokers), lets the clients move to the other region, heals the
// fault and waits until every acknowledged message has been delivered.
// Every send, acknowledgement, delivery and observation is recorded with
// its time in a History; Analyze turns a History into a Report, which
// renders as a text summary, one JSON line and a self-contained HTML page
// with an SVG timeline.
//
// Invariants:
//   - Every message carries a unique, traceable payload (drill ID,
//     producer, sequence), so loss and duplicates are counted per message,
//     never inferred from totals.
//   - Figures come only from what was recorded. A figure that could not be
//     measured (no publish succeeded in the target region, say) is reported
//     as missing, never estimated.
//   - Analyze is a pure function of the History: it is tested on
//     hand-made histories.
//
// The drill does not start or stop the cluster, and it never changes
// another namespace than its own (default public/drill).
package drill
