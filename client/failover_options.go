package client

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// FailoverMode selects how a multi-region client picks its region.
type FailoverMode int

const (
	// FailoverAuto probes every region and leaves the active one after
	// FailedProbes failed probes in a row; it returns to the primary (the
	// first region) once the primary has answered every probe for
	// SwitchBackDelay.
	FailoverAuto FailoverMode = iota
	// FailoverControlled switches only when told: by the failover group's
	// target (Admin.SetFailoverTarget, polled every ProbeInterval) or by
	// Client.SwitchTo.
	FailoverControlled
)

// String returns "auto" or "controlled".
func (m FailoverMode) String() string {
	switch m {
	case FailoverAuto:
		return "auto"
	case FailoverControlled:
		return "controlled"
	}
	return fmt.Sprintf("failover-mode(%d)", int(m))
}

// ParseFailoverMode parses "auto" or "controlled".
func ParseFailoverMode(s string) (FailoverMode, error) {
	switch s {
	case "", "auto":
		return FailoverAuto, nil
	case "controlled":
		return FailoverControlled, nil
	}
	return 0, fmt.Errorf("%w: failover mode %q (want auto or controlled)", ErrInvalidArgument, s)
}

// RegionURL is one region of a multi-region client: its name (as the
// brokers of the region call it) and the addresses of some of its brokers.
type RegionURL struct {
	// Name is the region name (letters, digits, '-', '_', '.').
	Name string
	// URL is host:port of a broker of the region, or a comma-separated
	// list of them.
	URL string
}

// FailoverOptions configure a multi-region client (Options.Regions or a
// URL "a=host:port,b=host:port").
type FailoverOptions struct {
	// Mode is the policy. Default FailoverAuto.
	Mode FailoverMode
	// ProbeInterval is how often each region is probed (auto) or the
	// failover group's target is read (controlled). Default 1s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default ProbeInterval (at most 2s).
	ProbeTimeout time.Duration
	// FailedProbes is how many probes of the active region must fail in a
	// row before the client switches (auto). Default 3, limit
	// MaxFailedProbes.
	FailedProbes int
	// SwitchBackDelay is how long the primary must answer every probe
	// before the client returns to it (auto). Default 30s; negative never
	// switches back automatically.
	SwitchBackDelay time.Duration
	// Group names the failover group whose target the client follows
	// (controlled; required then).
	Group string
}

// Limits of the failover options.
const (
	// MaxRegions bounds the regions of a client.
	MaxRegions = 16
	// MaxFailedProbes bounds FailoverOptions.FailedProbes.
	MaxFailedProbes = 1000
	// MinProbeInterval is the smallest ProbeInterval: probes cost an RPC
	// per region each.
	MinProbeInterval = 10 * time.Millisecond
)

// DefaultFailoverOptions returns FailoverOptions with every default.
func DefaultFailoverOptions() FailoverOptions {
	return FailoverOptions{Mode: FailoverAuto, ProbeInterval: time.Second, FailedProbes: 3, SwitchBackDelay: 30 * time.Second}
}

func (o FailoverOptions) withDefaults() FailoverOptions {
	d := DefaultFailoverOptions()
	if o.ProbeInterval == 0 {
		o.ProbeInterval = d.ProbeInterval
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = min(o.ProbeInterval, 2*time.Second)
	}
	if o.FailedProbes == 0 {
		o.FailedProbes = d.FailedProbes
	}
	if o.SwitchBackDelay == 0 {
		o.SwitchBackDelay = d.SwitchBackDelay
	}
	return o
}

// validate reports the first invalid field (defaults applied).
func (o FailoverOptions) validate() error {
	if o.Mode != FailoverAuto && o.Mode != FailoverControlled {
		return fmt.Errorf("%w: Failover.Mode %d unknown (want FailoverAuto or FailoverControlled)", ErrInvalidArgument, int(o.Mode))
	}
	if o.ProbeInterval < MinProbeInterval {
		return fmt.Errorf("%w: Failover.ProbeInterval %v must be >= %v", ErrInvalidArgument, o.ProbeInterval, MinProbeInterval)
	}
	if o.ProbeTimeout < 0 {
		return fmt.Errorf("%w: Failover.ProbeTimeout %v must be >= 0", ErrInvalidArgument, o.ProbeTimeout)
	}
	if o.FailedProbes < 1 || o.FailedProbes > MaxFailedProbes {
		return fmt.Errorf("%w: Failover.FailedProbes %d out of range [1, %d]", ErrInvalidArgument, o.FailedProbes, MaxFailedProbes)
	}
	if o.Mode == FailoverControlled {
		if o.Group == "" {
			return fmt.Errorf("%w: Failover.Group is required with FailoverControlled", ErrInvalidArgument)
		}
		if err := validateRegionName("Failover.Group", o.Group); err != nil {
			return err
		}
	}
	return nil
}

// validateRegionName checks a region or group name: the broker's naming
// rules (letters, digits, '-', '_', '.'; at most maxNameLen bytes).
func validateRegionName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, field, len(s), maxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("%w: %s %q has character %q at %d; allowed: [a-zA-Z0-9_.-]", ErrInvalidArgument, field, s, c, i)
		}
	}
	return nil
}

// ParseRegionURLs parses a multi-region URL: "a=host:port,b=host:port".
// An item without "name=" adds an address to the region before it
// ("a=h1:1,h2:2,b=h3:3"). The first region is the primary. It returns nil
// for a URL naming no region (a plain broker list).
func ParseRegionURLs(url string) ([]RegionURL, error) {
	if !strings.Contains(url, "=") {
		return nil, nil
	}
	var out []RegionURL
	for i, item := range strings.Split(url, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, named := strings.Cut(item, "=")
		if !named {
			if len(out) == 0 {
				return nil, fmt.Errorf("%w: URL item %d %q: the first item must be region=host:port", ErrInvalidArgument, i, item)
			}
			out[len(out)-1].URL += "," + item
			continue
		}
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if err := validateRegionName(fmt.Sprintf("URL item %d region", i), name); err != nil {
			return nil, err
		}
		if addr == "" {
			return nil, fmt.Errorf("%w: URL item %d: region %q has no address", ErrInvalidArgument, i, name)
		}
		out = append(out, RegionURL{Name: name, URL: addr})
	}
	return out, nil
}

// validateRegions checks Options.Regions.
func validateRegions(rs []RegionURL) error {
	if len(rs) > MaxRegions {
		return fmt.Errorf("%w: Regions has %d regions, limit %d", ErrInvalidArgument, len(rs), MaxRegions)
	}
	for i, r := range rs {
		if err := validateRegionName(fmt.Sprintf("Regions[%d].Name", i), r.Name); err != nil {
			return err
		}
		for j := range i {
			if rs[j].Name == r.Name {
				return fmt.Errorf("%w: Regions[%d].Name %q repeats Regions[%d]", ErrInvalidArgument, i, r.Name, j)
			}
		}
		addrs := splitAddrs(r.URL)
		if len(addrs) == 0 {
			return fmt.Errorf("%w: Regions[%d].URL is empty (region %s)", ErrInvalidArgument, i, r.Name)
		}
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("%w: Regions[%d].URL address %q: want host:port (%v)", ErrInvalidArgument, i, a, err)
			}
		}
	}
	return nil
}

// splitAddrs splits a comma-separated address list, dropping blanks.
func splitAddrs(url string) []string {
	var out []string
	for _, a := range strings.Split(url, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
