//go:build !unix

package metadata_test

import (
	"testing"

	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// deadAddr returns a loopback address nothing listens on (see the unix
// version, which also keeps other processes off it).
func deadAddr(t *testing.T) string {
	t.Helper()
	return metadatatest.FreeAddr(t)
}
