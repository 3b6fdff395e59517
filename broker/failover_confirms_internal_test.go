package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// TestFailoverConfirmsBoundedInBytes: the freshness memory of
// GetFailoverTarget never holds more than its byte bound, whatever number
// of group names clients ask about; a group asked about again keeps its
// one entry.
func TestFailoverConfirmsBoundedInBytes(t *testing.T) {
	const limit = 8192
	f := failoverConfirms{limit: limit}
	now := time.Now()
	for i := range 10000 {
		f.record(fmt.Sprintf("group-%05d", i), now, i%2 == 0)
		if f.bytes > limit {
			t.Fatalf("after %d groups the memory holds %d bytes, bound %d", i+1, f.bytes, limit)
		}
		var sum int64
		for g := range f.at {
			sum += int64(len(g)) + failoverConfirmCost
		}
		if sum != f.bytes {
			t.Fatalf("after %d groups: counted %d bytes, entries cost %d", i+1, f.bytes, sum)
		}
	}
	before := f.bytes
	f.record("group-09999", now.Add(time.Second), false)
	if f.bytes != before {
		t.Fatalf("recording a known group again changed the memory from %d to %d bytes", before, f.bytes)
	}
	if c := f.get("group-09999"); c.failed || !c.ok.Equal(now.Add(time.Second)) {
		t.Fatalf("group-09999 = %+v, want its last successful read", c)
	}
}

// TestConfigMaxFailoverConfirmBytes: the bound is validated, naming the
// field.
func TestConfigMaxFailoverConfirmBytes(t *testing.T) {
	c := DefaultConfig()
	c.Region = "a"
	c.Global, c.Regional = struct{ metadata.Store }{}, struct{ metadata.Store }{}
	c.Ledgers = struct{ LedgerStore }{}
	if err := c.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c.MaxFailoverConfirmBytes = 100
	err := c.Validate()
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "max_failover_confirm_bytes 100 must be in [4096,") {
		t.Fatalf("validate with max_failover_confirm_bytes 100: %v, want an error naming the field and the limit", err)
	}
}
