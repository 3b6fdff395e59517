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
// the region's deliveries). Count is the number of distinct messages
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
	diverged, unacked := 0, 0
	for _, k := range sortedKeys(all) {
		var missing, holding []string
		for _, r := range x.regions {
			if x.readCount[r][k] == 0 {
				missing = append(missing, r)
				lacks[r]++
			} else {
				holding = append(holding, r)
			}
		}
		if len(missing) == 0 {
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
		Detail: fmt.Sprintf("%d of %d messages not in every region's read-back (%d of them not acknowledged); missing per region: %s",
			diverged, len(all), unacked, perRegionString(x.regions, lacks)),
		Examples: ex,
	}
}
