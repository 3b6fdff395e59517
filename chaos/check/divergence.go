package check

import (
	"fmt"
)

// checkDivergence compares, after the heal, the sets of distinct messages
// of the run in each region's read-back: every region must hold every
// message some region holds (all topics are replicated everywhere),
// acknowledged or not. A message whose send timed out or failed and that
// one region stored and another did not is divergence, not loss; an
// acknowledged one missing from a read-back is both (lost also looks at
// the region's deliveries). When the reads name their copies
// (Record.StoredOrigin, OriginID), a message held by every region but with
// a copy (a resend stored by another region) missing from one is
// divergence too. Count is the number of distinct messages
// missing from at least one region. Without any read-back there is
// nothing to compare and the checker passes, saying so.
func checkDivergence(x *hindex, _ Options) Result {
	all := map[msgKey]bool{}
	for _, m := range x.readCount {
		for k := range m {
			all[k] = true
		}
	}
	if len(all) == 0 {
		return Result{Pass: true, Detail: "no read-back: nothing to compare"}
	}
	lacks := map[string]int{}
	var ex examples
	diverged, unacked, copies := 0, 0, 0
	for _, k := range sortedKeys(all) {
		var missing, holding []string
		excused := false
		for _, r := range x.regions {
			if s := x.sends[k]; x.readCount[r][k] == 0 && s != nil && x.deletedIn(s, r) {
				excused = true // deleted there by an operator action
				continue
			}
			if x.readCount[r][k] == 0 {
				missing = append(missing, r)
				lacks[r]++
			} else {
				holding = append(holding, r)
			}
		}
		if len(missing) == 0 && excused {
			continue // a region that lost it by request has no copy to compare
		}
		if len(missing) == 0 {
			// Every region holds the message: with copy IDs, every
			// region must also hold each of its copies.
			if m := x.missingCopies(k); len(m) > 0 {
				diverged++
				copies++
				for _, r := range m {
					lacks[r]++
				}
				ex.add("%s: a copy is not in %v", k, m)
			}
			continue
		}
		diverged++
		outcome := "never sent"
		if s := x.sends[k]; s != nil {
			outcome = string(s.outcome)
			if outcome == "" {
				outcome = "unanswered"
			}
		}
		if outcome != string(KindAck) {
			unacked++
		}
		ex.add("%s (%s) in %v, not in %v", k, outcome, holding, missing)
	}
	return Result{
		Pass:  diverged == 0,
		Count: diverged,
		Detail: fmt.Sprintf("%d of %d messages not in every region's read-back (%d of them not acknowledged, %d with only a copy missing); missing per region: %s%s",
			diverged, len(all), unacked, copies, perRegionString(x.regions, lacks), x.noReadBack()),
		Examples: ex,
	}
}

// missingCopies returns the regions lacking a copy of k that another
// region holds (nil when k's reads do not all name their copy).
func (x *hindex) missingCopies(k msgKey) []string {
	if x.noCopyID[k] {
		return nil
	}
	var out []string
	for _, r := range x.regions {
		for ck := range x.copiesOf[k] {
			if x.copyCount[r][ck] == 0 {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
