//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/meridianmq/meridian/region"
	"github.com/spf13/cobra"
)

// How the tools find a secured dev cluster's credentials: `meridian dev`
// writes DIR/cluster.json (0600) with its CA bundle and admin token files
// and every broker's and metadata node's address. The tools look at the
// dev commands' default --data-dir ($MERIDIAN_DEV_DIR, else
// ./meridian-dev) and at every running cluster registered in
// region.DevRegistryDir (~/.cache/meridian/dev: a ready cluster records
// its --data-dir there). When a tool command has no credential flag (and no context gave one)
// and one of its --url or --metadata addresses (or one of a multi-region
// url's) is an address of that cluster, it connects with the cluster's CA
// and admin token: the README walk-throughs run unchanged against a
// secured dev cluster.

// devDirEnv names the environment variable of the default dev data dir.
const devDirEnv = "MERIDIAN_DEV_DIR"

// devDataDirDefault is the default --data-dir of the dev commands.
func devDataDirDefault() string {
	if v := os.Getenv(devDirEnv); v != "" {
		return v
	}
	return region.DefaultDevConfig().DataDir
}

// devAddressFlags are the flags whose addresses may name a dev cluster.
var devAddressFlags = []string{"url", "metadata"}

// applyDevCluster gives cmd the credentials of the running dev cluster
// whose address it targets (see above); it changes nothing otherwise.
func applyDevCluster(cmd *cobra.Command) {
	s := cliSecurity
	if s.token != "" || s.tokenFile != "" || s.tlsCA != "" || s.tlsCert != "" || s.key != "" {
		return
	}
	for p := cmd; p != nil; p = p.Parent() {
		if p.Name() == "dev" && p.Parent() == rootCmd {
			return // the dev commands talk to the control endpoint with its token
		}
	}
	var addrs []string
	for _, name := range devAddressFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			continue
		}
		// A string slice flag prints as [a,b].
		for _, a := range strings.Split(strings.Trim(f.Value.String(), "[]"), ",") {
			a = strings.TrimSpace(a)
			if i := strings.Index(a, "="); i >= 0 {
				a = a[i+1:] // region=host:port
			}
			if a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, dir := range append([]string{devDataDirDefault()}, region.RegisteredDevClusters()...) {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		if seen[dir] {
			continue
		}
		seen[dir] = true
		info, err := region.ReadDevCluster(dir)
		if err != nil || info.CA == "" {
			continue
		}
		for _, a := range addrs {
			if info.HasAddress(a) {
				cliSecurity.tlsCA, cliSecurity.tokenFile = info.CA, info.AdminToken
				return
			}
		}
	}
}
