package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFailoverPolicy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := newFailoverPolicy(3, 0, 3, 10*time.Second)
	probe := func(s int, ok ...bool) {
		for i, v := range ok {
			p.probed(i, v, at(s))
		}
	}
	probe(0, true, true, true)
	if _, yes := p.decide(at(0)); yes {
		t.Fatal("switch while everything is healthy")
	}
	probe(1, false, true, true)
	probe(2, false, false, true)
	if _, yes := p.decide(at(2)); yes {
		t.Fatal("switch after 2 failed probes of 3")
	}
	probe(3, false, false, true)
	d, yes := p.decide(at(3))
	if !yes || d.to != 2 || !d.started.Equal(at(1)) {
		t.Fatalf("decision %+v %v, want to region 2 (first healthy; 1 failed) started at the first failure", d, yes)
	}
	p.switched(d.to)
	// The primary heals: back only after 10 s of good probes.
	probe(4, true, true, true)
	if _, yes := p.decide(at(13)); yes {
		t.Fatal("switched back before the delay")
	}
	probe(14, true, true, true)
	d, yes = p.decide(at(14))
	if !yes || d.to != 0 {
		t.Fatalf("decision %+v %v, want back to the primary", d, yes)
	}
	p.switched(0)
	// A flapping primary restarts the delay; nowhere healthy: stay.
	probe(20, false, false, false)
	probe(21, false, false, false)
	probe(22, false, false, false)
	if _, yes := p.decide(at(22)); yes {
		t.Fatal("switched with no healthy region")
	}
	// Never switch back with a negative delay.
	q := newFailoverPolicy(2, 1, 1, -1)
	q.probed(0, true, t0)
	q.probed(1, true, t0)
	if _, yes := q.decide(t0.Add(time.Hour)); yes {
		t.Fatal("switched back with SwitchBackDelay < 0")
	}
}

func TestParseRegionURLs(t *testing.T) {
	rs, err := ParseRegionURLs("a=h1:1, h2:2,b=h3:3")
	if err != nil || len(rs) != 2 || rs[0] != (RegionURL{"a", "h1:1,h2:2"}) || rs[1] != (RegionURL{"b", "h3:3"}) {
		t.Fatalf("%v %v", rs, err)
	}
	if rs, err := ParseRegionURLs("h1:1,h2:2"); rs != nil || err != nil {
		t.Fatalf("plain list: %v %v", rs, err)
	}
	for _, bad := range []string{"h1:1,a=h2:2", "a b=h:1", "a="} {
		if _, err := ParseRegionURLs(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestFailoverOptionsValidate(t *testing.T) {
	base := Options{Regions: []RegionURL{{"a", "127.0.0.1:1"}, {"b", "127.0.0.1:2"}}}
	cases := []struct {
		mut  func(*Options)
		want string
	}{
		{func(o *Options) { o.Failover.ProbeInterval = time.Millisecond }, "Failover.ProbeInterval"},
		{func(o *Options) { o.Failover.ProbeTimeout = -time.Second }, "Failover.ProbeTimeout"},
		{func(o *Options) { o.Failover.FailedProbes = MaxFailedProbes + 1 }, "Failover.FailedProbes"},
		{func(o *Options) { o.Failover.FailedProbes = -1 }, "Failover.FailedProbes"},
		{func(o *Options) { o.Failover.Mode = 9 }, "Failover.Mode"},
		{func(o *Options) { o.Failover.Mode = FailoverControlled }, "Failover.Group"},
		{func(o *Options) { o.Failover.Mode, o.Failover.Group = FailoverControlled, "g/1" }, "Failover.Group"},
		{func(o *Options) { o.Regions[1].Name = "a" }, "Regions[1].Name"},
		{func(o *Options) { o.Regions[1].Name = "" }, "Regions[1].Name"},
		{func(o *Options) { o.Regions[0].URL = "nohost" }, "Regions[0].URL"},
		{func(o *Options) { o.Regions[1].URL = " " }, "Regions[1].URL"},
		{func(o *Options) { o.URL = "127.0.0.1:3" }, "URL and Regions"},
		{func(o *Options) {
			for i := range MaxRegions + 1 {
				o.Regions = append(o.Regions, RegionURL{Name: "r" + string(rune('a'+i)), URL: "127.0.0.1:1"})
			}
		}, "Regions has"},
	}
	ok := base
	ok.Regions = append([]RegionURL(nil), base.Regions...)
	if err := ok.withDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		o := base
		o.Regions = append([]RegionURL(nil), base.Regions...)
		c.mut(&o)
		err := o.withDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("want ErrInvalidArgument naming %q, got %v", c.want, err)
		}
	}
	o := Options{URL: "a=127.0.0.1:1", Regions: base.Regions}
	if err := o.resolveRegions(); err == nil || !strings.Contains(err.Error(), "Regions") {
		t.Errorf("URL with regions plus Regions: %v", err)
	}
	if _, err := ParseFailoverMode("sometimes"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("mode: %v", err)
	}
}

// TestTargetTrackerFollowsOnlyHigherVersions: the controlled policy
// follows version N, ignores an older N-1 (a stale region's copy) and the
// same N again, and follows N+1.
func TestTargetTrackerFollowsOnlyHigherVersions(t *testing.T) {
	tr := targetTracker{}
	for _, c := range []struct {
		v    int64
		want targetVerdict
	}{{5, targetNewer}, {4, targetOlder}, {5, targetSame}, {3, targetOlder}, {6, targetNewer}, {5, targetOlder}} {
		if got := tr.observe(c.v); got != c.want {
			t.Fatalf("version %d after %d: verdict %v, want %v", c.v, tr.seen, got, c.want)
		}
	}
}
