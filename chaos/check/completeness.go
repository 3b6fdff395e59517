package check

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Operator actions and what they excuse.
//
// A topic deleted with --force in region R loses, by the operator's
// request, what R held: its log and its subscriptions' positions there.
// The window of a delete runs from its request to the completion of the
// first create-topic of the same topic in R after it (without one: to the
// delete's completion; a producer or consumer reconnecting re-creates the
// topic at once). What a message needs then depends on when it was
// acknowledged (for divergence, an unacknowledged message: sent):
//
//   - before the window's end and acknowledged by R (written there): it
//     may never have left R, so no region needs it (lost, divergence);
//   - before the window's end and acknowledged by another region: R need
//     not hold it (lost, divergence), the other regions must;
//   - after the window's end: every region must hold it, as if the topic
//     had never been deleted.
//
// For subscription completeness a delete of the topic in any region
// excuses every message of the topic acknowledged before its window's
// end: the subscriptions of the region were deleted with their cursors,
// and what their consumers had not received yet is gone with them.

// deleteWindow is one topic delete in one region.
type deleteWindow struct {
	region, topic string
	start, end    time.Time
}

// deleteWindows returns the delete windows of the history's operator
// actions.
func (x *hindex) deleteWindows() []deleteWindow {
	if x.delWins != nil {
		return *x.delWins
	}
	var out []deleteWindow
	for i, r := range x.ops {
		op := r.Op
		if op.Action != OpDeleteTopic {
			continue
		}
		w := deleteWindow{region: op.Region, topic: op.Topic, start: op.Started, end: r.T}
		if w.start.IsZero() {
			w.start = r.T
		}
		for _, c := range x.ops[i+1:] {
			if c.Op.Action == OpCreateTopic && c.Op.Region == op.Region && c.Op.Topic == op.Topic && c.Op.Err == "" {
				w.end = c.T
				break
			}
		}
		out = append(out, w)
	}
	x.delWins = &out
	return out
}

// doneT is when a message's send resolved: its acknowledgement, else its
// invocation.
func (s *sendInfo) doneT() time.Time {
	if s.outcome == KindAck {
		return s.ackT
	}
	return s.sendT
}

// deletedIn reports whether a delete of the message's topic in region
// excuses region from holding it (see above).
func (x *hindex) deletedIn(s *sendInfo, region string) bool {
	for _, w := range x.deleteWindows() {
		if w.topic == s.topic && w.region == region && s.doneT().Before(w.end) {
			return true
		}
	}
	return false
}

// deletedAtOrigin reports whether the message was acknowledged by a
// region that then deleted its topic before it could be known to have
// left: no region needs it.
func (x *hindex) deletedAtOrigin(s *sendInfo) bool {
	return s.outcome == KindAck && x.deletedIn(s, s.ackRegion)
}

// deletedBefore reports whether a delete of the message's topic in any
// region excuses it for subscription completeness.
func (x *hindex) deletedBefore(s *sendInfo) bool {
	for _, w := range x.deleteWindows() {
		if w.topic == s.topic && s.doneT().Before(w.end) {
			return true
		}
	}
	return false
}

// deletedElsewhere reports whether topic was deleted by an operator
// action in a region other than region.
func (x *hindex) deletedElsewhere(topic, region string) bool {
	return slices.ContainsFunc(x.deleteWindows(), func(w deleteWindow) bool { return w.topic == topic && w.region != region })
}

// skippedFor reports whether an explicit request (a reset to latest, a
// skip) of subscription sub on topic, in any region, completed after the
// message was sent.
func (x *hindex) skippedFor(topic, sub string, s *sendInfo) bool {
	for _, r := range x.ops {
		op := r.Op
		if op.Topic == topic && op.Sub == sub && (op.Action == OpSkip || (op.Action == OpSeek && op.Position != "earliest")) && s.sendT.Before(r.T) {
			return true
		}
	}
	return false
}

// repSub is one replicated subscription, whatever region its deliveries
// happen in: a topic and a name.
type repSub struct{ topic, name string }

func (s repSub) String() string { return s.topic + ":" + s.name }

// repSubInfo is what completeness knows of one replicated subscription.
type repSubInfo struct {
	// earliest: created at the earliest position somewhere (the run's
	// own subscriptions, created before the first message); else
	// latestAt is the completion of its first creation at latest.
	earliest bool
	latestAt time.Time
}

// checkCompleteness is subscription completeness: every acknowledged
// message of a topic is delivered at least once to every replicated
// subscription of the topic, in some region (a replicated subscription is
// one subscription in every region: its name on the topic), unless
//
//   - the subscription was created only at latest, and the message was
//     sent before its first creation completed;
//   - an explicit request skipped it: a reset (seek) of the subscription
//     to latest, or a skip, in any region, that completed after the
//     message was sent (a reset to earliest skips nothing);
//   - a delete of the topic excuses it (see above).
//
// The replicated subscriptions are the run's (Run.Subscriptions with
// Replicated, created at earliest before the first message) and those an
// operator action created (OpCreateSubscription with Replicated). A
// subscription acknowledges only what it was delivered, so "delivered"
// covers "acknowledged". Count is the number of (subscription, message)
// pairs never delivered.
func checkCompleteness(x *hindex, _ Options) Result {
	subs := map[repSub]*repSubInfo{}
	var order []repSub
	get := func(k repSub) *repSubInfo {
		if s, ok := subs[k]; ok {
			return s
		}
		s := &repSubInfo{}
		subs[k] = s
		order = append(order, k)
		return s
	}
	if x.run != nil {
		for _, s := range x.run.Subscriptions {
			if s.Replicated {
				get(repSub{s.Topic, s.Name}).earliest = true
			}
		}
	}
	for _, r := range x.ops {
		op := r.Op
		if op.Err != "" || op.Action != OpCreateSubscription || !op.Replicated {
			continue
		}
		k := repSub{op.Topic, op.Sub}
		{
			s := get(k)
			if op.Position == "earliest" {
				s.earliest = true
			} else if s.latestAt.IsZero() || r.T.Before(s.latestAt) {
				s.latestAt = r.T
			}
		}
	}
	if len(order) == 0 {
		return Result{Pass: true, Detail: "no replicated subscription"}
	}
	// Deliveries per replicated subscription, every region merged.
	delivered := map[repSub]map[msgKey]bool{}
	for _, sk := range x.subOrder {
		k := repSub{sk.Topic, sk.Sub}
		if subs[k] == nil {
			continue
		}
		if delivered[k] == nil {
			delivered[k] = map[msgKey]bool{}
		}
		for m := range x.deliveredSet[sk] {
			delivered[k][m] = true
		}
	}
	var ex examples
	missing, excused := 0, 0
	perSub := map[repSub]int{}
	for _, m := range x.sendOrder {
		s := x.sends[m]
		if s.outcome != KindAck {
			continue
		}
		for _, k := range order {
			if k.topic != s.topic {
				continue
			}
			info := subs[k]
			if !info.earliest && (info.latestAt.IsZero() || !s.sendT.After(info.latestAt)) {
				continue
			}
			if delivered[k][m] {
				continue
			}
			// A failed reset or skip may still have moved the cursor:
			// skippedFor counts it.
			if x.deletedBefore(s) || x.skippedFor(k.topic, k.name, s) {
				excused++
				continue
			}
			missing++
			perSub[k]++
			ex.add("%s acknowledged by %s at %s, never delivered to replicated subscription %s", m, s.ackRegion, s.ackT.Format("15:04:05.000"), k)
		}
	}
	var parts []string
	for _, k := range order {
		if perSub[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", k, perSub[k]))
		}
	}
	detail := fmt.Sprintf("%d (subscription, message) pairs never delivered over %d replicated subscriptions; %d excused by an operator action", missing, len(order), excused)
	if len(parts) > 0 {
		detail += " (" + strings.Join(parts, ", ") + ")"
	}
	return Result{Pass: missing == 0, Count: missing, Detail: detail, Examples: ex}
}
