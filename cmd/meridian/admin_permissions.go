package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// addPermissionCmds adds the authorization commands (issue 21):
// tenants update --admin-roles; namespaces grant-permission /
// revoke-permission / permissions, grant-prefix-permission /
// revoke-prefix-permission / prefix-permissions; topics grant-permission /
// revoke-permission / permissions.
func addPermissionCmds(o *adminOpts, tenants, namespaces, topics *cobra.Command) {
	// tenants update
	tupd := &cobra.Command{Use: "update TENANT --admin-roles r1,r2", Short: "Replace a tenant's admin roles (\"\" = none)"}
	var adminRoles []string
	tupd.Flags().StringSliceVar(&adminRoles, "admin-roles", nil, "roles that may administer everything inside the tenant (comma-separated; \"\" = none)")
	_ = tupd.MarkFlagRequired("admin-roles")
	tupd.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.UpdateTenant(ctx, args[0], cleanRegions(adminRoles)); err != nil {
			return err
		}
		out.done("updated tenant", args[0])
		return nil
	})
	tenants.AddCommand(tupd)

	scopeOf := func(kind, arg string) client.PermissionScope {
		switch kind {
		case "topic":
			return client.PermissionScope{Topic: arg}
		case "prefix":
			return client.PermissionScope{Prefix: arg}
		}
		return client.PermissionScope{Namespace: arg}
	}
	// grant / revoke / show for one scope kind.
	add := func(parent *cobra.Command, kind, suffix, argName, what string) {
		grant := &cobra.Command{Use: "grant" + suffix + "-permission " + argName + " --role R --actions produce,consume",
			Short: "Grant a role produce and/or consume on " + what}
		var role string
		var actions []string
		grant.Flags().StringVar(&role, "role", "", "the role (a token's sub or a certificate's CN)")
		grant.Flags().StringSliceVar(&actions, "actions", nil, "produce, consume (comma-separated)")
		_ = grant.MarkFlagRequired("role")
		_ = grant.MarkFlagRequired("actions")
		grant.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.GrantPermission(ctx, scopeOf(kind, args[0]), role, actions); err != nil {
				return err
			}
			out.done("granted "+strings.Join(actions, ",")+" to "+role+" on", args[0])
			return nil
		})
		revoke := &cobra.Command{Use: "revoke" + suffix + "-permission " + argName + " --role R", Short: "Revoke a role's grant on " + what}
		var rrole string
		revoke.Flags().StringVar(&rrole, "role", "", "the role")
		_ = revoke.MarkFlagRequired("role")
		revoke.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
			if err := a.RevokePermission(ctx, scopeOf(kind, args[0]), rrole); err != nil {
				return err
			}
			out.done("revoked "+rrole+" on", args[0])
			return nil
		})
		name := "permissions"
		if suffix != "" {
			name = strings.TrimPrefix(suffix, "-") + "-permissions"
		}
		show := &cobra.Command{Use: name + " " + argName, Short: "Show the grants on " + what,
			RunE: adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
				p, err := a.GetPermissions(ctx, scopeOf(kind, args[0]))
				if err != nil {
					return err
				}
				if out.json {
					out.message(p)
					return nil
				}
				for _, r := range slices.Sorted(maps.Keys(p.GetPermissions())) {
					fmt.Fprintf(out.w, "%s: %s\n", r, strings.Join(p.GetPermissions()[r].GetActions(), ","))
				}
				for _, pre := range slices.Sorted(maps.Keys(p.GetPrefixPermissions())) {
					roles := p.GetPrefixPermissions()[pre].GetRoles()
					for _, r := range slices.Sorted(maps.Keys(roles)) {
						fmt.Fprintf(out.w, "prefix %s: %s: %s\n", pre, r, strings.Join(roles[r].GetActions(), ","))
					}
				}
				if p.GetStale() {
					fmt.Fprintln(out.w, "(stale: the global shard could not be read)")
				}
				return nil
			})}
		parent.AddCommand(grant, revoke, show)
	}
	add(namespaces, "namespace", "", "TENANT/NS", "every topic of a namespace")
	add(namespaces, "prefix", "-prefix", "TENANT/NS/PREFIX", "the topics whose name below the namespace starts with PREFIX and is longer than it")
	add(topics, "topic", "", "TOPIC", "a topic (and, when partitioned, its partitions)")
}
