// Package run is the runner of `meridian chaos run`: a workload of
// producers and consumers in every region of a `meridian dev` cluster, a
// catalogue of faults injected and healed through the cluster's control
// API, a seeded schedule (Plan) or a named scenario, and the history the
// checkers of package check judge.
//
// Invariants: every fault injected is healed (at its step's end, and again
// by a heal-all at the end of the run, also when the run is cancelled);
// the schedule is a pure function of (seed, faults, duration, shape), so a
// seed replays the same faults; every send is recorded before it is handed
// to the client and completed by exactly one ack or timeout record.
//
// It does not judge: the verdict comes from check.Check on the history.
package run
