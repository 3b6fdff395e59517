package drill

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Kinds of drill.
const (
	// KindFailover injects a fault in From and lets the clients fail over
	// to To.
	KindFailover = "failover"
	// KindSwitchback is the return trip: the workload runs in From and an
	// operator moves it to To (a controlled switch, no fault).
	KindSwitchback = "switchback"
)

// Faults a drill can inject into its source region.
const (
	// FaultKillRegion sends SIGKILL to every process of the region
	// (metadata node, bookies, brokers); the heal starts them again with
	// their data (metadata first, then bookies, then brokers).
	FaultKillRegion = "kill-region"
	// FaultCutLinks cuts the region's links to every other region (the dev
	// cluster's link proxies) and the clients' path to its brokers (the
	// drill's own proxies, through the client's DialRewrite). Its
	// processes keep running: a partition, not a crash.
	FaultCutLinks = "cut-links"
	// FaultPauseBrokers sends SIGSTOP to the region's brokers (SIGCONT at
	// heal): they hang with their connections open.
	FaultPauseBrokers = "pause-brokers"
	// FaultNone injects nothing (a controlled move).
	FaultNone = "none"
)

// Faults lists the faults Config.Fault accepts.
var Faults = []string{FaultKillRegion, FaultCutLinks, FaultPauseBrokers}

// Ways the workload's clients move between regions (Config.Mode).
const (
	// ModeClient uses the client's own failover (client.Options with
	// several regions: automatic for a failover drill, controlled through
	// the failover group's target for a switchback).
	ModeClient = "client"
	// ModeReconnect has the drill move the workload itself: it probes
	// From like the automatic policy does and, after FailedProbes failed
	// probes (or at the operator's command), closes the clients of From
	// and opens new ones in To, resending what was not acknowledged.
	ModeReconnect = "reconnect"
)

// defaultMode: the client's own failover between regions.
const defaultMode = ModeClient

// Limits of a drill's configuration.
const (
	MaxRate        = 100_000
	MaxDuration    = 24 * time.Hour
	MaxProducers   = 64
	MaxConsumers   = 64
	MinPayloadSize = 64
	MaxPayloadSize = 1 << 20
)

// Config configures a drill. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Cluster is the dev cluster's cluster.json (or its directory).
	// Required.
	Cluster string
	// Kind is KindFailover (default) or KindSwitchback.
	Kind string
	// From is the region the workload starts in, To the one it moves to.
	// Required, different.
	From, To string
	// Fault is what a failover drill injects in From (default
	// kill-region); a switchback injects nothing.
	Fault string
	// Rate is the total publish rate in messages/s (default 2000).
	Rate float64
	// Duration is how long the producers run (default 60s).
	Duration time.Duration
	// FaultAfter is when the fault (or switch command) happens, from the
	// start of the workload (default Duration/4).
	FaultAfter time.Duration
	// HealAfter is when the fault is healed, from the start of the
	// workload (default FaultAfter + Duration/2).
	HealAfter time.Duration
	// DrainTimeout bounds the wait, after the producers stop and the
	// fault is healed, for every acknowledged message to be delivered and
	// seen in To (default 2m).
	DrainTimeout time.Duration
	// Producers and Consumers of the workload (defaults 2 and 1); Size the
	// payload size in bytes (default 200).
	Producers, Consumers, Size int
	// Namespace holds the drill's topics; it is created if missing and
	// made to replicate between From and To (default public/drill).
	Namespace string
	// Mode is ModeClient (default) or ModeReconnect.
	Mode string
	// PerRegionSubscription makes the workload's subscription an ordinary
	// one, created in both regions, instead of a replicated subscription:
	// nothing is lost, and the consumers receive again in To everything
	// they acknowledged in From (for comparison).
	PerRegionSubscription bool
	// ProbeInterval and FailedProbes drive the automatic failover
	// (defaults 500ms and 3).
	ProbeInterval time.Duration
	FailedProbes  int
	// ID names the drill (topic, subscription, producers); default random.
	ID string
	// Progress receives a line per second while the drill runs (nil: none).
	Progress io.Writer
	// Logger receives the drill's logs (default: discard).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults (Cluster, From and To empty).
func DefaultConfig() Config {
	return Config{
		Kind: KindFailover, Fault: FaultKillRegion, Rate: 2000, Duration: 60 * time.Second,
		DrainTimeout: 2 * time.Minute, Producers: 2, Consumers: 1, Size: 200,
		Namespace: "public/drill", ProbeInterval: 500 * time.Millisecond, FailedProbes: 3,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Kind == "" {
		c.Kind = d.Kind
	}
	if c.Fault == "" {
		c.Fault = d.Fault
		if c.Kind == KindSwitchback {
			c.Fault = FaultNone
		}
	}
	if c.Rate == 0 {
		c.Rate = d.Rate
	}
	if c.Duration == 0 {
		c.Duration = d.Duration
	}
	if c.FaultAfter == 0 {
		c.FaultAfter = c.Duration / 4
	}
	if c.HealAfter == 0 {
		c.HealAfter = c.FaultAfter + c.Duration/2
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.Producers == 0 {
		c.Producers = d.Producers
	}
	if c.Consumers == 0 {
		c.Consumers = d.Consumers
	}
	if c.Size == 0 {
		c.Size = d.Size
	}
	if c.Namespace == "" {
		c.Namespace = d.Namespace
	}
	if c.Mode == "" {
		c.Mode = defaultMode
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.FailedProbes == 0 {
		c.FailedProbes = d.FailedProbes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first bad field by its flag name (defaults
// applied first).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Cluster == "":
		return errors.New("drill: --cluster is required (the dev cluster's DIR/cluster.json)")
	case c.Kind != KindFailover && c.Kind != KindSwitchback:
		return fmt.Errorf("drill: kind %q: want %s or %s", c.Kind, KindFailover, KindSwitchback)
	case c.From == "" || c.To == "":
		return errors.New("drill: --from and --to are required (region names)")
	case c.From == c.To:
		return fmt.Errorf("drill: --from and --to are both %q: a drill moves between two regions", c.From)
	case c.Kind == KindFailover && !slices.Contains(Faults, c.Fault):
		return fmt.Errorf("drill: --fault %q: want one of %s", c.Fault, strings.Join(Faults, ", "))
	case c.Kind == KindSwitchback && c.Fault != FaultNone:
		return fmt.Errorf("drill: --fault %q: a switchback is a controlled move, it injects no fault", c.Fault)
	case c.Rate < 1 || c.Rate > MaxRate:
		return fmt.Errorf("drill: --rate %v must be in [1, %d] messages/s", c.Rate, MaxRate)
	case c.Duration < time.Second || c.Duration > MaxDuration:
		return fmt.Errorf("drill: --duration %v must be in [1s, %v]", c.Duration, MaxDuration)
	case c.FaultAfter <= 0 || c.FaultAfter >= c.Duration:
		return fmt.Errorf("drill: --fault-after %v must be in (0, --duration %v)", c.FaultAfter, c.Duration)
	case c.HealAfter <= c.FaultAfter:
		return fmt.Errorf("drill: --heal-after %v must be after --fault-after %v", c.HealAfter, c.FaultAfter)
	case c.DrainTimeout < time.Second:
		return fmt.Errorf("drill: --drain-timeout %v must be >= 1s", c.DrainTimeout)
	case c.Producers < 1 || c.Producers > MaxProducers:
		return fmt.Errorf("drill: --producers %d must be in [1, %d]", c.Producers, MaxProducers)
	case c.Consumers < 1 || c.Consumers > MaxConsumers:
		return fmt.Errorf("drill: --consumers %d must be in [1, %d]", c.Consumers, MaxConsumers)
	case c.Size < MinPayloadSize || c.Size > MaxPayloadSize:
		return fmt.Errorf("drill: --size %d must be in [%d, %d] bytes (the payload carries the message's identity)", c.Size, MinPayloadSize, MaxPayloadSize)
	case strings.Count(c.Namespace, "/") != 1:
		return fmt.Errorf("drill: --namespace %q: want tenant/namespace", c.Namespace)
	case c.Mode != ModeClient && c.Mode != ModeReconnect:
		return fmt.Errorf("drill: --mode %q: want %s or %s", c.Mode, ModeClient, ModeReconnect)
	case c.ProbeInterval < 10*time.Millisecond || c.ProbeInterval > time.Minute:
		return fmt.Errorf("drill: --probe-interval %v must be in [10ms, 1m]", c.ProbeInterval)
	case c.FailedProbes < 1 || c.FailedProbes > 100:
		return fmt.Errorf("drill: --failed-probes %d must be in [1, 100]", c.FailedProbes)
	case len(c.ID) > 32 || strings.ContainsAny(c.ID, " /:"):
		return fmt.Errorf("drill: --id %q: at most 32 characters, no spaces, '/' or ':'", c.ID)
	}
	return nil
}
