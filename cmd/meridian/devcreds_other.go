//go:build !unix

package main

import "github.com/spf13/cobra"

// applyDevCluster does nothing: `meridian dev` runs on unix only.
func applyDevCluster(*cobra.Command) {}
