package check

import (
	"fmt"
	"strings"
)

// checkDuplicated (Count: duplicate deliveries plus messages stored twice
// in a way storage forbids) counts, per subscription, the deliveries of a message
// beyond its first (at-least-once allows them: they fail the checker only
// with Options.BoundDuplicates, beyond MaxDuplicates per subscription),
// and checks storage: in each region's read-back a message of a
// deduplicating producer must appear at most once, and every message must
// appear as often in each region that holds it (replication copies each
// stored entry exactly once; a copy stored twice by a receiver is a
// failure whether or not its producer deduplicates: exactly, when the
// reads name their copy (Record.StoredOrigin and OriginID), the same copy
// read twice in one region; else a message read more often in one region
// than in another that holds it). A non-deduplicating
// producer's message stored twice everywhere (a resend after a timeout)
// is counted only. So is a deduplicating producer's message held in a
// region as copies first stored by different regions, each once: a client
// failover made two regions accept it (dedup holds per region; see
// docs/geo/failover-dedup.md); two copies first stored by the same region
// fail.
func checkDuplicated(x *hindex, opt Options) Result {
	var ex examples
	total, dedupDups := 0, 0
	var perSub []string
	over := 0
	for _, sk := range x.subOrder {
		seen := map[msgKey]int{}
		dups := 0
		for _, d := range x.deliveries[sk] {
			k := keyOf(d)
			seen[k]++
			if seen[k] > 1 {
				dups++
				if s := x.sends[k]; s != nil && s.dedup {
					dedupDups++
				}
			}
		}
		if dups == 0 {
			continue
		}
		total += dups
		perSub = append(perSub, fmt.Sprintf("%s: %d", sk, dups))
		if opt.BoundDuplicates && dups > opt.MaxDuplicates {
			over++
			ex.add("subscription %s: %d duplicate deliveries, bound %d", sk, dups, opt.MaxDuplicates)
		}
	}
	// Storage: counts of each message in each region's read-back.
	storedTwice, dedupTwice, replTwice, failoverCopies := 0, 0, 0, 0
	all := map[msgKey]bool{}
	for _, m := range x.readCount {
		for k := range m {
			all[k] = true
		}
	}
	// A copy named by its storage origin and ID read twice in one region
	// was stored twice by that region's replication receiver.
	copyTwice := map[msgKey]bool{}
	for _, r := range x.regions {
		for ck, n := range x.copyCount[r] {
			if n > 1 && !copyTwice[ck.msg] {
				copyTwice[ck.msg] = true
				replTwice++
				ex.add("%s: copy %s@%s stored %d times in %s (a replicated copy stored twice)", ck.msg, ck.id, ck.origin, n, r)
			}
		}
	}
	for _, k := range sortedKeys(all) {
		dedup := x.sends[k] != nil && x.sends[k].dedup
		lo, hi, loR, hiR := 0, 0, "", ""
		twice := false
		for _, r := range x.regions {
			n := x.readCount[r][k]
			if n == 0 {
				continue // missing: divergence or lost, not a duplicate
			}
			if n > 1 {
				storedTwice += n - 1
			}
			if dedup && n > 1 {
				if x.copiesFromDistinctOrigins(r, k, n) {
					failoverCopies++
				} else {
					twice = true
					ex.add("%s (deduplicating producer) stored %d times in %s", k, n, r)
				}
			}
			if loR == "" || n < lo {
				lo, loR = n, r
			}
			if n > hi {
				hi, hiR = n, r
			}
		}
		if twice {
			dedupTwice++
		}
		// Without copy IDs: a message held more often in one region than
		// in another (each holding it) had a copy stored twice.
		if hi > lo && x.noCopyID[k] && !copyTwice[k] {
			replTwice++
			ex.add("%s stored %d times in %s but %d in %s (a replicated copy stored twice)", k, hi, hiR, lo, loR)
		}
	}
	failed := over + dedupTwice + replTwice
	var b strings.Builder
	fmt.Fprintf(&b, "%d duplicate deliveries (%d of messages of deduplicating producers, %d of others)", total, dedupDups, total-dedupDups)
	if len(perSub) > 0 {
		fmt.Fprintf(&b, "; per subscription: %s", strings.Join(perSub, ", "))
	}
	if opt.BoundDuplicates {
		fmt.Fprintf(&b, "; %d subscriptions over the bound %d", over, opt.MaxDuplicates)
	}
	fmt.Fprintf(&b, "; extra copies read back %d; messages stored twice despite dedup %d, replicated copies stored twice %d", storedTwice, dedupTwice, replTwice)
	if failoverCopies > 0 {
		fmt.Fprintf(&b, "; dedup messages held as two copies first stored by different regions (a client failover; allowed) %d", failoverCopies)
	}
	return Result{Pass: failed == 0, Count: total + dedupTwice + replTwice, Detail: b.String(), Examples: ex}
}

// copiesFromDistinctOrigins reports whether region r's n reads of k name n
// copies, each read once and each first stored by a different region.
func (x *hindex) copiesFromDistinctOrigins(r string, k msgKey, n int) bool {
	if x.noCopyID[k] {
		return false
	}
	origins := map[string]bool{}
	for ck := range x.copiesOf[k] {
		switch c := x.copyCount[r][ck]; {
		case c > 1:
			return false
		case c == 1:
			if origins[ck.origin] {
				return false
			}
			origins[ck.origin] = true
		}
	}
	return len(origins) == n
}
