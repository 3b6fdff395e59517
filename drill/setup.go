//go:build unix

package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region"
)

// Setting a drill up: the cluster, the namespace, the topic and the
// subscriptions, all before the first message.

// setup reads the cluster, checks both regions and prepares the
// namespace, the topic and the subscriptions.
func (r *run) setup(ctx context.Context) (*client.Admin, *client.Admin, error) {
	cfg := r.cfg
	info, err := region.ReadDevCluster(clusterDir(cfg.Cluster))
	if err != nil {
		return nil, nil, fmt.Errorf("--cluster: %w", err)
	}
	r.info = info
	if r.ctl, err = info.ControlClient(nil); err != nil {
		return nil, nil, fmt.Errorf("--cluster: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if r.st, err = r.ctl.Status(sctx); err != nil {
		return nil, nil, err
	}
	for _, p := range r.st.Processes {
		if p.Role == region.RoleBroker {
			r.brokers[p.Region] = append(r.brokers[p.Region], p.GRPC)
		}
	}
	var regions []string
	for reg := range r.brokers {
		regions = append(regions, reg)
	}
	slices.Sort(regions)
	for _, x := range []struct{ flag, name string }{{"--from", cfg.From}, {"--to", cfg.To}} {
		if len(r.brokers[x.name]) == 0 {
			return nil, nil, fmt.Errorf("%s %q: not a region of the dev cluster (%s)", x.flag, x.name, strings.Join(regions, ","))
		}
		for _, p := range processesOf(r.st, x.name, "") {
			if p.State != "running" {
				return nil, nil, fmt.Errorf("%s %q: process %s is %s (start it: meridian dev start %s %s %d)", x.flag, x.name, p.Name, p.State, p.Role, p.Region, p.Index)
			}
		}
	}
	if cfg.Fault == FaultCutLinks && cfg.Mode != ModeClient {
		return nil, nil, errors.New("--fault cut-links needs --mode client: only the client's DialRewrite routes the workload through the drill's proxies")
	}
	adminFrom, err := client.NewAdminWithOptions(ctx, r.secure(client.Options{URL: joinAddrs(r.brokers[cfg.From]), ConnectTimeout: 10 * time.Second}))
	if err != nil {
		return nil, nil, fmt.Errorf("region %s: %w", cfg.From, err)
	}
	adminTo, err := client.NewAdminWithOptions(ctx, r.secure(client.Options{URL: joinAddrs(r.brokers[cfg.To]), ConnectTimeout: 10 * time.Second}))
	if err != nil {
		_ = adminFrom.Close(context.Background())
		return nil, nil, fmt.Errorf("region %s: %w", cfg.To, err)
	}
	if err := r.prepareNamespace(ctx, adminFrom, adminTo); err != nil {
		_ = adminFrom.Close(context.Background())
		_ = adminTo.Close(context.Background())
		return nil, nil, err
	}
	return adminFrom, adminTo, nil
}

// prepareNamespace creates the drill's namespace if needed, makes it
// replicate between From and To, and waits until To sees that.
func (r *run) prepareNamespace(ctx context.Context, adminFrom, adminTo *client.Admin) error {
	cfg := r.cfg
	want := []string{cfg.From, cfg.To}
	_, err := adminFrom.GetNamespacePolicies(ctx, cfg.Namespace)
	switch {
	case errors.Is(err, client.ErrNotFound):
		if err := adminFrom.CreateNamespace(ctx, cfg.Namespace, &client.NamespacePolicies{ReplicationRegions: want}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			return fmt.Errorf("--namespace %s: create: %w", cfg.Namespace, err)
		}
	case err != nil:
		return fmt.Errorf("--namespace %s: %w", cfg.Namespace, err)
	}
	have, _, err := adminFrom.GetNamespaceReplication(ctx, cfg.Namespace)
	if err != nil {
		return fmt.Errorf("--namespace %s: %w", cfg.Namespace, err)
	}
	if !slices.Contains(have, cfg.From) || !slices.Contains(have, cfg.To) {
		union := slices.Clone(have)
		for _, x := range want {
			if !slices.Contains(union, x) {
				union = append(union, x)
			}
		}
		if err := adminFrom.SetNamespaceReplication(ctx, cfg.Namespace, union); err != nil {
			return fmt.Errorf("--namespace %s: replicate to %v: %w", cfg.Namespace, union, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, _, err := adminTo.GetNamespaceReplication(ctx, cfg.Namespace)
		if err == nil && slices.Contains(got, cfg.From) && slices.Contains(got, cfg.To) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("--namespace %s: region %s does not see replication %v after 60s (last: %v %v)", cfg.Namespace, cfg.To, want, got, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// prepareSubscriptions creates the topic in both regions and the
// workload's subscription before the first message, and says how its
// progress reaches To.
func (r *run) prepareSubscriptions(ctx context.Context, adminFrom, adminTo *client.Admin, spec *workloadSpec) (string, error) {
	cfg := r.cfg
	admins := []struct {
		name string
		a    *client.Admin
	}{{cfg.From, adminFrom}, {cfg.To, adminTo}}
	for _, x := range admins {
		if err := x.a.CreateTopic(ctx, r.topic); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			return "", fmt.Errorf("create topic %s in %s: %w", r.topic, x.name, err)
		}
	}
	if !cfg.PerRegionSubscription {
		// A replicated subscription: its acknowledgement vector reaches To
		// through the replicator, where the subscription is created by
		// the first update.
		spec.replicated = true
		if err := adminFrom.CreateReplicatedSubscription(ctx, r.topic, r.sub, client.Latest); err != nil {
			return "", fmt.Errorf("create replicated subscription %s on %s in %s: %w", r.sub, r.topic, cfg.From, err)
		}
		return fmt.Sprintf("replicated (acknowledgements replicated from %s to %s)", cfg.From, cfg.To), nil
	}
	// Without replicated subscriptions, the subscription exists in each
	// region on its own: created in both before the first message, the
	// copy in To holds every message, so a consumer that moves there
	// loses nothing and receives again what it had acknowledged in From.
	for _, x := range admins {
		if err := x.a.CreateSubscription(ctx, r.topic, r.sub, client.Latest); err != nil {
			return "", fmt.Errorf("create subscription %s on %s in %s: %w", r.sub, r.topic, x.name, err)
		}
	}
	return fmt.Sprintf("per-region (not replicated): created in %s and %s before the first message; the copy in %s delivers again what was acknowledged in %s", cfg.From, cfg.To, cfg.To, cfg.From), nil
}
