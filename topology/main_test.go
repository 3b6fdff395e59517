package topology

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default number of checks: the interesting
// topologies (enough bookies, tight racks) are a minority of random draws.
// -rapid.checks or RAPID_CHECKS still override it.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set && !env {
		if err := flag.Set("rapid.checks", "2000"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
