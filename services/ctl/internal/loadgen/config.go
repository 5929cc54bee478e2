// Package loadgen simulates a fleet of stackstream agents: hosts that publish
// raw CPU and memory profiles on profiles.raw, and the debuginfo of their
// binaries, under the record contract (schemas/record), with stack shapes
// drawn from a corpus recorded by the agent and varied per service, binary
// version and host.
package loadgen

import (
	"errors"
	"fmt"
	"time"
)

// Config is one simulated fleet. Every field is bounded by Validate.
type Config struct {
	Hosts           int           // simulated hosts
	Cores           int           // CPUs per host
	Rate            int           // samples per second per CPU (the agent's frequency)
	Interval        time.Duration // profile interval of each host
	Busy            float64       // share of the host's CPU time spent running (sampled)
	Services        int           // services (one process each) per host
	Replicas        int           // hosts running the same service
	Churn           float64       // process restarts per host per minute
	BinariesPerHour float64       // new service binaries (deploys) per hour, fleet-wide
	LabelValues     int           // distinct k8s_pod values per service
	Mutate          float64       // share of samples whose stack is varied on the host
	Duration        time.Duration // simulated time covered
	Speed           float64       // simulated seconds per real second
	Seed            int64         // same seed and flags, same records
	HostPrefix      string        // host IDs are HostPrefix + a number
	AgentVersion    string        // value of the agent version header
}

// DefaultConfig is the agent's defaults on a 8-core host.
func DefaultConfig() Config {
	return Config{
		Hosts: 10, Cores: 8, Rate: 19, Interval: 10 * time.Second, Busy: 1,
		Services: 5, Replicas: 10, Churn: 1, BinariesPerHour: 10, LabelValues: 10,
		Mutate: 0.05, Duration: 5 * time.Minute, Speed: 1, Seed: 1,
		HostPrefix: "loadgen-", AgentVersion: "loadgen",
	}
}

// Bounds of Config: a flag past them is an error, never clamped.
const (
	MaxHosts           = 100_000
	MaxCores           = 512
	MaxRate            = 1000
	MinInterval        = time.Second
	MaxInterval        = 10 * time.Minute
	MaxServices        = 1000
	MaxChurn           = 6000
	MaxBinariesPerHour = 100_000
	MaxLabelValues     = 1_000_000
	MaxDuration        = 7 * 24 * time.Hour // the rollup's and indexer's default retention
	MinSpeed           = 0.01
	MaxSpeed           = 10_000
	// MaxSamplesPerProfile bounds cores x rate x interval x busy: raw
	// samples drawn for one host and interval.
	MaxSamplesPerProfile = 1_000_000
	// MaxDeploys bounds BinariesPerHour x Duration: the deploy schedule is
	// computed at start.
	MaxDeploys  = 1_000_000
	maxHostText = 64
)

// ErrInvalid wraps every Validate error.
var ErrInvalid = errors.New("invalid loadgen setting")

// Validate checks every bound and says which flag is wrong.
func (c Config) Validate() error {
	bad := func(flag string, v any, want string) error {
		return fmt.Errorf("%w: --%s=%v: %s", ErrInvalid, flag, v, want)
	}
	switch {
	case c.Hosts < 1 || c.Hosts > MaxHosts:
		return bad("hosts", c.Hosts, fmt.Sprintf("want 1..%d", MaxHosts))
	case c.Cores < 1 || c.Cores > MaxCores:
		return bad("cores", c.Cores, fmt.Sprintf("want 1..%d", MaxCores))
	case c.Rate < 1 || c.Rate > MaxRate:
		return bad("rate", c.Rate, fmt.Sprintf("want 1..%d Hz", MaxRate))
	case c.Interval < MinInterval || c.Interval > MaxInterval || c.Interval%time.Second != 0:
		return bad("interval", c.Interval, fmt.Sprintf("want whole seconds in %v..%v", MinInterval, MaxInterval))
	case !(c.Busy > 0 && c.Busy <= 1):
		return bad("busy", c.Busy, "want a share in (0, 1]")
	case c.Services < 1 || c.Services > MaxServices:
		return bad("services", c.Services, fmt.Sprintf("want 1..%d per host", MaxServices))
	case c.Replicas < 1 || c.Replicas > MaxHosts:
		return bad("replicas", c.Replicas, fmt.Sprintf("want 1..%d hosts per service", MaxHosts))
	case !(c.Churn >= 0 && c.Churn <= MaxChurn):
		return bad("churn", c.Churn, fmt.Sprintf("want 0..%d restarts per host per minute", MaxChurn))
	case !(c.BinariesPerHour >= 0 && c.BinariesPerHour <= MaxBinariesPerHour):
		return bad("binaries-per-hour", c.BinariesPerHour, fmt.Sprintf("want 0..%d", MaxBinariesPerHour))
	case c.LabelValues < 1 || c.LabelValues > MaxLabelValues:
		return bad("label-values", c.LabelValues, fmt.Sprintf("want 1..%d per service", MaxLabelValues))
	case !(c.Mutate >= 0 && c.Mutate <= 1):
		return bad("mutate", c.Mutate, "want a share in [0, 1]")
	case c.Duration < c.Interval || c.Duration > MaxDuration:
		return bad("duration", c.Duration, fmt.Sprintf("want %v (one interval)..%v", c.Interval, MaxDuration))
	case !(c.Speed >= MinSpeed && c.Speed <= MaxSpeed):
		return bad("speed", c.Speed, fmt.Sprintf("want %v..%v simulated seconds per second", MinSpeed, MaxSpeed))
	case c.HostPrefix == "" || len(c.HostPrefix) > maxHostText || !hostText(c.HostPrefix):
		return bad("host-prefix", fmt.Sprintf("%q", c.HostPrefix), fmt.Sprintf("want 1..%d of [a-zA-Z0-9._-]", maxHostText))
	case len(c.AgentVersion) > maxHostText:
		return bad("agent-version", fmt.Sprintf("%q", c.AgentVersion), fmt.Sprintf("want at most %d bytes", maxHostText))
	}
	if n := c.SamplesPerProfile(); n < 1 || n > MaxSamplesPerProfile {
		return fmt.Errorf("%w: --cores x --rate x --interval x --busy = %d raw samples per profile: want 1..%d", ErrInvalid, n, MaxSamplesPerProfile)
	}
	if n := c.BinariesPerHour * c.Duration.Hours(); n > MaxDeploys {
		return fmt.Errorf("%w: --binaries-per-hour x --duration = %.0f deploys: want at most %d", ErrInvalid, n, MaxDeploys)
	}
	return nil
}

// SamplesPerProfile is the raw samples drawn for one host and interval.
func (c Config) SamplesPerProfile() int64 {
	return int64(float64(c.Cores)*float64(c.Rate)*c.Interval.Seconds()*c.Busy + 0.5)
}

// Span is the real time a run of c takes: Duration at Speed.
func (c Config) Span() time.Duration { return time.Duration(float64(c.Duration) / c.Speed) }

// SimStart is the simulated time a run of c started at wall time wall0
// publishes from: (wall0 + Span) back by Duration, so that the run's last
// interval is stamped at the wall clock. At speed 1 it is wall0; a
// catch-up run (Speed > 1) starts in the past.
func (c Config) SimStart(wall0 time.Time) time.Time { return wall0.Add(c.Span() - c.Duration) }

// SimTime is the simulated time at wall time t of a run of c started at
// wall0: SimStart, plus the real time since wall0 at Speed.
func (c Config) SimTime(wall0, t time.Time) time.Time {
	return c.SimStart(wall0).Add(time.Duration(float64(t.Sub(wall0)) * c.Speed))
}

// Period is the CPU time one sample stands for, as the agent computes it.
func (c Config) Period() int64 { return int64(time.Second) / int64(c.Rate) }

// CatalogueServices is how many distinct services the fleet runs: each
// host runs Services of them, each service on about Replicas hosts.
func (c Config) CatalogueServices() int {
	n := (c.Hosts*c.Services + c.Replicas - 1) / c.Replicas
	return max(n, c.Services)
}

func hostText(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}
