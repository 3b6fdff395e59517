//go:build unix

package run

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/client"
)

// FamilyOperator is the family of operator actions: administration done
// through the real admin API of the dev cluster (topic delete and
// re-create, unload, replication changes, subscriptions created, reset
// or moved during a partition, a controlled failover switch), treated as
// faults as Jepsen treats membership changes. It is not in
// DefaultFamilies: `--faults operator` or a scenario (operator-actions)
// asks for it.
const FamilyOperator = "operator"

// operator is what the operator actions need of a run: the admin clients
// of every region, the history, the topics and the workload (for the
// consumers an action opens).
type operator struct {
	admins  map[string]*client.Admin
	rec     *recorder
	w       *workload
	id      string
	ns      string
	topics  []string
	regions []string
	// addSub registers a subscription an action created, so that the
	// quiet period waits for its backlog too.
	addSub func(name string)
}

// faultIDKey carries the fault ID of a step to its inject and heal.
type faultIDKey struct{}

func faultID(ctx context.Context) int {
	id, _ := ctx.Value(faultIDKey{}).(int)
	return id
}

// opsOf returns the cluster's operator, or an error before the setup.
func opsOf(c *cluster) (*operator, error) {
	if c.ops == nil {
		return nil, errors.New("operator actions: the run's setup has not finished")
	}
	return c.ops, nil
}

// opInject adapts an operator action to a Kind's injectFn: it runs with
// the cluster's operator.
func opInject(f func(ctx context.Context, c *cluster, o *operator, st Step) (string, error)) func(context.Context, *cluster, Step) (string, error) {
	return func(ctx context.Context, c *cluster, st Step) (string, error) {
		o, err := opsOf(c)
		if err != nil {
			return "", err
		}
		return f(ctx, c, o, st)
	}
}

// opHeal adapts an operator action's inverse to a Kind's healFn.
func opHeal(f func(ctx context.Context, c *cluster, o *operator, st Step) error) func(context.Context, *cluster, Step) error {
	return func(ctx context.Context, c *cluster, st Step) error {
		o, err := opsOf(c)
		if err != nil {
			return err
		}
		return f(ctx, c, o, st)
	}
}

// topic resolves a step's topic parameter ("t3") to one of the run's
// topics (modulo their number: a schedule does not know how many there
// are).
func (o *operator) topic(param string) string {
	f := strings.Fields(param)
	var i int
	if len(f) > 0 {
		_, _ = fmt.Sscanf(f[0], "t%d", &i)
	}
	return o.topics[i%len(o.topics)]
}

// do runs an operator action f and records op with its start, end and
// error; it returns f's error.
func (o *operator) do(ctx context.Context, op check.Op, f func() error) error {
	started := time.Now()
	err := f()
	o.record(ctx, started, op, err)
	return err
}

// record adds an operator action's record, completed now.
func (o *operator) record(ctx context.Context, started time.Time, op check.Op, err error) {
	op.Started, op.Fault = started, faultID(ctx)
	if err != nil {
		op.Err = err.Error()
	}
	o.rec.add(check.Record{Kind: check.KindOp, Region: op.Region, Topic: op.Topic, Op: &op})
}

// retryOp calls f until it succeeds or its error is not worth a retry,
// for at most d.
func retryOp(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || time.Now().After(deadline) || errors.Is(err, client.ErrInvalidArgument) {
			return err
		}
		if err := sleepUntil(ctx, time.Now().Add(500*time.Millisecond)); err != nil {
			return err
		}
	}
}

// repsubFirstRead is how many messages repsub-partitioned's first
// consumer reads before it goes away.
const repsubFirstRead = 400

// opSubName names the subscription an action of step st creates (the
// step's time makes it unique in the run and the same at inject and heal).
func opSubName(prefix string, st Step) string {
	return fmt.Sprintf("%s-%d", prefix, st.At.Milliseconds())
}

// openConsumer subscribes a consumer of the replicated subscription sub
// on topic through c and consumes it (recording every delivery) until the
// workload closes. home is the region of a client pinned to one region
// ("" when c fails over). The subscription is Shared: consumers in two
// regions at once promise no order.
func (o *operator) openConsumer(ctx context.Context, c *client.Client, home, topic, sub string, pos client.InitialPosition) error {
	return o.openConsumerN(ctx, c, home, topic, sub, pos, 0)
}

// openConsumerN is openConsumer for a consumer that goes away after
// limit deliveries (0: none).
func (o *operator) openConsumerN(ctx context.Context, c *client.Client, home, topic, sub string, pos client.InitialPosition, limit int) error {
	name := fmt.Sprintf("%s-%s-c0", sub, home)
	if limit > 0 {
		name = fmt.Sprintf("%s-%s-first%d", sub, home, limit)
	}
	if home == "" {
		name = sub + "-controlled-c0"
	}
	var co *client.Consumer
	err := retryOp(ctx, time.Minute, func(ctx context.Context) error {
		var err error
		co, err = c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.Shared, InitialPosition: pos,
			Name: name, ReceiverQueueSize: 1000, Replicated: true})
		return err
	})
	if err != nil {
		return fmt.Errorf("subscribe %s on %s: %w", sub, topic, err)
	}
	spec := subSpec{Subscription: check.Subscription{Region: home, Topic: topic, Name: sub, Type: "shared", Replicated: true}, typ: client.Shared, consumers: 1}
	cc := &cons{co: co, c: c, home: home, name: name, sub: spec, region: c.ActiveRegion, limit: limit}
	if home != "" {
		cc.region = func() string { return home }
	}
	o.addSub(sub)
	o.w.addConsumer(cc)
	return nil
}

func positionName(p client.InitialPosition) string {
	if p == client.Latest {
		return "latest"
	}
	return "earliest"
}

// cutRegion cuts every WAN link of r both ways (heal: healRegion).
func cutRegion(ctx context.Context, c *cluster, r string) error {
	return c.eachOther(r, func(o string) error { return c.link(ctx, linkReq{Op: "cut", A: r, B: o}) })
}

func healRegion(ctx context.Context, c *cluster, r string) error {
	return c.eachOther(r, func(o string) error { return c.link(ctx, linkReq{Op: "heal", A: r, B: o}) })
}

// opRegionTopic picks a region and a topic index.
func opRegionTopic(rng *rand.Rand, s Shape) ([]string, string) {
	return []string{pickRegion(rng, s)}, fmt.Sprintf("t%d", rng.IntN(8))
}

// opTwoRegions picks a region and another one, and a topic index.
func opTwoRegions(rng *rand.Rand, s Shape) ([]string, string) {
	a := pickRegion(rng, s)
	return []string{a, pickOtherRegion(rng, s, a)}, fmt.Sprintf("t%d", rng.IntN(8))
}

func nopHeal(context.Context, *cluster, Step) error { return nil }

// setReplication sets the namespace's replication regions through the
// admin of region via and waits until every region of want sees exactly
// want (a region left out is asked too: it learns it is out).
func (o *operator) setReplication(ctx context.Context, via string, want []string) error {
	return o.do(ctx, check.Op{Action: check.OpSetReplication, Region: via, Regions: want}, func() error {
		err := retryOp(ctx, time.Minute, func(ctx context.Context) error { return o.admins[via].SetNamespaceReplication(ctx, o.ns, want) })
		if err != nil {
			return err
		}
		for _, reg := range o.regions {
			err = errors.Join(err, retryOp(ctx, time.Minute, func(ctx context.Context) error {
				got, _, err := o.admins[reg].GetNamespaceReplication(ctx, o.ns)
				if err != nil {
					return err
				}
				if !sameSet(got, want) {
					return fmt.Errorf("%w: region %s sees replication %v, want %v", client.ErrUnavailable, reg, got, want)
				}
				return nil
			}))
		}
		return err
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// operatorKinds are the operator actions of the catalogue.
var operatorKinds = []Kind{
	{
		Name: "topic-recreate", Family: FamilyOperator,
		Description: "admin topics delete --force a topic in one region, then create it again (producers and consumers reconnect to the new topic)",
		Heal:        "nothing (the topic exists again)",
		pickFn:      opRegionTopic,
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			reg, t := st.Targets[0], o.topic(st.Param)
			a := o.admins[reg]
			// A producer or consumer reconnecting may take the topic again
			// while it is deleted ("retry the delete"): retry.
			err := o.do(ctx, check.Op{Action: check.OpDeleteTopic, Region: reg, Topic: t}, func() error {
				return retryOp(ctx, time.Minute, func(ctx context.Context) error {
					err := a.DeleteTopic(ctx, t, true)
					if errors.Is(err, client.ErrNotFound) {
						return nil // deleted by a try whose answer was lost
					}
					return err
				})
			})
			if err != nil {
				return "delete " + t, err
			}
			err = o.do(ctx, check.Op{Action: check.OpCreateTopic, Region: reg, Topic: t}, func() error {
				return retryOp(ctx, time.Minute, func(ctx context.Context) error {
					err := a.CreateTopic(ctx, t)
					if errors.Is(err, client.ErrAlreadyExists) {
						return nil // re-created by a reconnecting producer
					}
					return err
				})
			})
			return "delete --force and create " + t, err
		}),
		healFn: nopHeal,
	},
	{
		Name: "unload", Family: FamilyOperator, Description: "admin topics unload a topic in one region (it moves or reloads)", Heal: "nothing",
		pickFn: opRegionTopic,
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			reg, t := st.Targets[0], o.topic(st.Param)
			err := o.do(ctx, check.Op{Action: check.OpUnload, Region: reg, Topic: t}, func() error {
				return retryOp(ctx, 30*time.Second, func(ctx context.Context) error { return o.admins[reg].UnloadTopic(ctx, t) })
			})
			return "unload " + t, err
		}),
		healFn: nopHeal,
	},
	{
		Name: "region-readd", Family: FamilyOperator, MinRegions: 2,
		Description: "remove one region from the namespace's replication (set-replication without it), then add it again",
		Heal:        "set-replication with every region again",
		pickFn:      func(rng *rand.Rand, s Shape) ([]string, string) { return []string{pickRegion(rng, s)}, "" },
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			r := st.Targets[0]
			rest := slices.DeleteFunc(slices.Clone(o.regions), func(x string) bool { return x == r })
			return "replication " + strings.Join(rest, ","), o.setReplication(ctx, rest[0], rest)
		}),
		healFn: opHeal(func(ctx context.Context, c *cluster, o *operator, st Step) error {
			return o.setReplication(ctx, st.Targets[0], o.regions)
		}),
	},
	{
		Name: "topic-replication", Family: FamilyOperator, MinRegions: 2,
		Description: "set-replication at topic level: a topic's replication set to every region explicitly (a topic policy over the namespace's)",
		Heal:        "remove the topic's replication policy",
		pickFn:      opRegionTopic,
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			reg, t := st.Targets[0], o.topic(st.Param)
			err := o.do(ctx, check.Op{Action: check.OpSetReplication, Region: reg, Topic: t, Regions: o.regions}, func() error {
				return retryOp(ctx, time.Minute, func(ctx context.Context) error { return o.admins[reg].SetTopicReplication(ctx, t, o.regions) })
			})
			return "topic replication " + strings.Join(o.regions, ","), err
		}),
		healFn: opHeal(func(ctx context.Context, c *cluster, o *operator, st Step) error {
			reg, t := st.Targets[0], o.topic(st.Param)
			err := o.do(ctx, check.Op{Action: check.OpSetReplication, Region: reg, Topic: t}, func() error {
				return retryOp(ctx, time.Minute, func(ctx context.Context) error {
					err := o.admins[reg].RemoveTopicReplication(ctx, t)
					if errors.Is(err, client.ErrNotFound) {
						return nil
					}
					return err
				})
			})
			return err
		}),
	},
	{
		Name: "repsub-partitioned", Family: FamilyOperator, MinRegions: 2,
		Description: "cut region A from every other; in B a consumer creates a new replicated subscription at earliest, reads and acknowledges 400 messages and goes away; in A a consumer creates it at latest, as a failed-over client does; after the heal a consumer in B reads the rest",
		Heal:        "heal A's links, then start B's consumer",
		pickFn:      opTwoRegions,
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			cut, other, t := st.Targets[0], st.Targets[1], o.topic(st.Param)
			sub := opSubName("op-sub", st)
			if err := cutRegion(ctx, c, cut); err != nil {
				return "cut " + cut, err
			}
			// In other, a consumer creates it at earliest, reads (and
			// acknowledges) part of the backlog and goes away.
			ocl, err := o.w.regionClient(ctx, other)
			if err != nil {
				return "", err
			}
			err = o.do(ctx, check.Op{Action: check.OpCreateSubscription, Region: other, Topic: t, Sub: sub, Replicated: true, Position: "earliest"}, func() error {
				return o.openConsumerN(ctx, ocl, other, t, sub, client.Earliest, repsubFirstRead)
			})
			if err != nil {
				return "create " + sub + " in " + other, err
			}
			cl, err := o.w.regionClient(ctx, cut)
			if err != nil {
				return "", err
			}
			err = o.do(ctx, check.Op{Action: check.OpCreateSubscription, Region: cut, Topic: t, Sub: sub, Replicated: true, Position: "latest"}, func() error {
				return o.openConsumer(ctx, cl, cut, t, sub, client.Latest)
			})
			return fmt.Sprintf("%s cut; %s created at earliest in %s (%d read), at latest in %s", cut, sub, other, repsubFirstRead, cut), err
		}),
		healFn: opHeal(func(ctx context.Context, c *cluster, o *operator, st Step) error {
			cut, other, t := st.Targets[0], st.Targets[1], o.topic(st.Param)
			if err := healRegion(ctx, c, cut); err != nil {
				return err
			}
			cl, err := o.w.regionClient(ctx, other)
			if err != nil {
				return err
			}
			return o.openConsumer(ctx, cl, other, t, opSubName("op-sub", st), client.Earliest)
		}),
	},
	{
		Name: "seek-partitioned", Family: FamilyOperator, MinRegions: 2,
		Description: "cut region A from every other and reset one of A's replicated subscriptions there (admin topics reset-cursor) to earliest or latest",
		Heal:        "heal A's links",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickRegion(rng, s)}, fmt.Sprintf("t%d %s", rng.IntN(8), []string{"earliest", "latest"}[rng.IntN(2)])
		},
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			reg, t := st.Targets[0], o.topic(st.Param)
			pos := client.Earliest
			if strings.HasSuffix(st.Param, "latest") {
				pos = client.Latest
			}
			sub := "rep-shared-" + reg
			if err := cutRegion(ctx, c, reg); err != nil {
				return "cut " + reg, err
			}
			err := o.do(ctx, check.Op{Action: check.OpSeek, Region: reg, Topic: t, Sub: sub, Replicated: true, Position: positionName(pos)}, func() error {
				return retryOp(ctx, 30*time.Second, func(ctx context.Context) error {
					return o.admins[reg].ResetSubscription(ctx, t, sub, client.ResetPosition{Initial: pos})
				})
			})
			return fmt.Sprintf("%s cut; %s reset to %s", reg, sub, positionName(pos)), err
		}),
		healFn: func(ctx context.Context, c *cluster, st Step) error { return healRegion(ctx, c, st.Targets[0]) },
	},
	{
		Name: "failover-switch", Family: FamilyOperator, MinRegions: 2,
		Description: "a consumer of a new replicated subscription on a controlled-failover client (group target A); admin failover set moves the group to B",
		Heal:        "admin failover set back to A",
		pickFn:      opTwoRegions,
		injectFn: opInject(func(ctx context.Context, c *cluster, o *operator, st Step) (string, error) {
			from, to, t := st.Targets[0], st.Targets[1], o.topic(st.Param)
			group := fmt.Sprintf("chaos-%s-%d", o.id, st.At.Milliseconds())
			sub := opSubName("op-failover", st)
			if err := o.failoverTarget(ctx, group, from); err != nil {
				return "", err
			}
			cl, err := o.w.controlledClient(ctx, group, from)
			if err != nil {
				return "", err
			}
			err = o.do(ctx, check.Op{Action: check.OpCreateSubscription, Region: from, Topic: t, Sub: sub, Replicated: true, Position: "earliest"}, func() error {
				return o.openConsumer(ctx, cl, "", t, sub, client.Earliest)
			})
			if err != nil {
				return "", err
			}
			// Let it consume and acknowledge in from before the switch.
			if err := sleepUntil(ctx, time.Now().Add(2*time.Second)); err != nil {
				return "", err
			}
			return fmt.Sprintf("group %s: %s -> %s", group, from, to), o.failoverTarget(ctx, group, to)
		}),
		healFn: opHeal(func(ctx context.Context, c *cluster, o *operator, st Step) error {
			return o.failoverTarget(ctx, fmt.Sprintf("chaos-%s-%d", o.id, st.At.Milliseconds()), st.Targets[0])
		}),
	},
}

// failoverTarget sets a failover group's target (through the target's
// admin) and records it.
func (o *operator) failoverTarget(ctx context.Context, group, region string) error {
	err := o.do(ctx, check.Op{Action: check.OpFailoverTarget, Region: region, Group: group}, func() error {
		return retryOp(ctx, time.Minute, func(ctx context.Context) error {
			_, err := o.admins[region].SetFailoverTarget(ctx, group, region)
			return err
		})
	})
	return err
}
