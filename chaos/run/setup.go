//go:build unix

package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/client"
)

// setup opens an admin client per region, creates the run's namespace
// replicated to every region, its topics and subscriptions (all before the
// first message, from the earliest position).
func (r *runner) setup(ctx context.Context) error {
	regions := r.cl.shape.Regions
	for _, reg := range regions {
		a, err := client.NewAdminWithOptions(ctx, r.cfg.secure(client.Options{URL: joinAddrs(r.brokers[reg]), ConnectTimeout: 10 * time.Second, OperationTimeout: 10 * time.Second}))
		if err != nil {
			return fmt.Errorf("admin of region %s: %w", reg, err)
		}
		r.admins[reg] = a
	}
	ns := r.cfg.Namespace
	first := r.admins[regions[0]]
	if err := retry(ctx, "create namespace "+ns, func(ctx context.Context) error {
		// Retention forever: the read-back from earliest must find every
		// stored message, so that a message missing from it is lost.
		err := first.CreateNamespace(ctx, ns, &client.NamespacePolicies{ReplicationRegions: regions, RetentionTimeSeconds: -1, RetentionSizeBytes: -1})
		if errors.Is(err, client.ErrAlreadyExists) {
			p, err := first.GetNamespacePolicies(ctx, ns)
			if err != nil {
				return err
			}
			p.RetentionTimeSeconds, p.RetentionSizeBytes = -1, -1
			if err := first.SetNamespacePolicies(ctx, ns, p); err != nil {
				return err
			}
			return first.SetNamespaceReplication(ctx, ns, regions)
		}
		return err
	}); err != nil {
		return err
	}
	for _, reg := range regions {
		if err := retry(ctx, fmt.Sprintf("namespace %s replicated, seen in %s", ns, reg), func(ctx context.Context) error {
			got, _, err := r.admins[reg].GetNamespaceReplication(ctx, ns)
			if err != nil {
				return err
			}
			for _, want := range regions {
				if !slices.Contains(got, want) {
					return fmt.Errorf("replication %v lacks %s", got, want)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for i := range r.cfg.Topics {
		r.topics = append(r.topics, fmt.Sprintf("%s/t%d", ns, i))
	}
	for _, t := range r.topics {
		for _, reg := range regions {
			if err := retry(ctx, fmt.Sprintf("create topic %s in %s", t, reg), func(ctx context.Context) error {
				if err := r.admins[reg].CreateTopic(ctx, t); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
					return err
				}
				return nil
			}); err != nil {
				return err
			}
		}
		for _, reg := range regions {
			// Replicated subscriptions are named after the region whose
			// consumers use them: a consumer that fails over to another
			// region goes on with the same subscription there, where no
			// other consumer of the run holds it.
			r.subs = append(r.subs,
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "rep-exclusive-" + reg, Type: "exclusive", Replicated: true}, typ: client.Exclusive, consumers: 1},
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "rep-failover-" + reg, Type: "failover", Replicated: true}, typ: client.Failover, consumers: 2},
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "rep-shared-" + reg, Type: "shared", Replicated: true}, typ: client.Shared, consumers: 2},
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "local-exclusive", Type: "exclusive"}, typ: client.Exclusive, consumers: 1},
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "local-failover", Type: "failover"}, typ: client.Failover, consumers: 2},
				subSpec{Subscription: check.Subscription{Region: reg, Topic: t, Name: "local-shared", Type: "shared"}, typ: client.Shared, consumers: 2},
			)
		}
	}
	for _, s := range r.subs {
		for _, reg := range regions {
			if !s.Replicated && reg != s.Region {
				continue
			}
			if err := retry(ctx, fmt.Sprintf("create subscription %s on %s in %s", s.Name, s.Topic, reg), func(ctx context.Context) error {
				var err error
				if s.Replicated {
					err = r.admins[reg].CreateReplicatedSubscription(ctx, s.Topic, s.Name, client.Earliest)
				} else {
					err = r.admins[reg].CreateSubscription(ctx, s.Topic, s.Name, client.Earliest)
				}
				if errors.Is(err, client.ErrAlreadyExists) {
					return nil
				}
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// retry calls f until it succeeds, for at most a minute.
func retry(ctx context.Context, what string, f func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := sleepUntil(ctx, time.Now().Add(250*time.Millisecond)); err != nil {
			return err
		}
	}
}
