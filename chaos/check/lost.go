package check

import "fmt"

// checkLost: an acknowledged message that, in some region of the run (every
// topic is replicated to every region), is missing from that region's
// read-back. The read-back is the authority (the runner keeps every
// message: retention forever): a message delivered in a region and later
// gone from its log (a bookie that acknowledged before its fsync and lost
// power) is lost there. Only for a region without a read-back do the
// deliveries there stand in for it. A topic deleted in a region by an
// operator action excuses what it held (completeness.go). Count is the number of distinct
// acknowledged messages lost in at least one region.
func checkLost(x *hindex, _ Options) Result {
	perRegion := map[string]int{}
	var ex examples
	lost, acked := 0, 0
	for _, k := range x.sendOrder {
		s := x.sends[k]
		if s.outcome != KindAck {
			continue
		}
		acked++
		if x.deletedAtOrigin(s) {
			continue
		}
		var missing []string
		for _, r := range x.regions {
			if x.readCount[r][k] > 0 || (!x.hasReadBack(r, s.topic) && x.deliveredIn[r][k]) || x.deletedIn(s, r) {
				continue
			}
			perRegion[r]++
			missing = append(missing, r)
		}
		if len(missing) > 0 {
			lost++
			ex.add("%s acknowledged by %s at %s, missing in %v", k, s.ackRegion, s.ackT.Format("15:04:05.000"), missing)
		}
	}
	return Result{
		Pass:     lost == 0,
		Count:    lost,
		Detail:   fmt.Sprintf("%d of %d acknowledged messages missing in some region (%s)%s", lost, acked, perRegionString(x.regions, perRegion), x.noReadBack()),
		Examples: ex,
	}
}
