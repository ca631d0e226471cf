package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FleetConfig is a fleet mode run: for each API and fleet size, a real
// 'forewarn serve' with default flags starts on a fresh store, settles,
// stops, and starts again on the same store.
type FleetConfig struct {
	APIs  []string `json:"apis"`
	Sizes []int    `json:"sizes"`
	// Runs is how many times each API and size is measured; the report
	// keeps the best of each figure.
	Runs int `json:"runs"`
	// Settle is how long a server runs idle before its RSS is read.
	Settle   time.Duration `json:"settle"`
	AddrBase netip.Addr    `json:"addrBase"`
	Binary   string        `json:"-"`
}

// Fleet targets (issue 26): idle RSS and restart at 100,000 VMs, and the
// growth of each figure from one size to the next.
const (
	FleetRSSTarget      = 200 << 20
	FleetEventRSSTarget = 300 << 20
	FleetRestartTarget  = 1500 * time.Millisecond
	FleetGrowthTarget   = 12.0
)

// FleetRun is the best of the runs of one API and size.
type FleetRun struct {
	API string `json:"api"`
	VMs int    `json:"vms"`
	// Start is from the command's start until both listeners print
	// their addresses, on an empty store; Restart the same on the store
	// the first server left.
	Start   time.Duration `json:"start"`
	Restart time.Duration `json:"restart"`
	// IdleRSS is the resident memory Settle after the restart.
	IdleRSS int64 `json:"idleRSS"`
	// Event is how long the operator's POST /v1/events of one event
	// naming every VM took to be answered (the event is in the store and
	// every VM's document rendered), and EventRSS the resident memory
	// Settle after it.
	Event    time.Duration `json:"event"`
	EventRSS int64         `json:"eventRSS"`
	// Growth is each figure over the previous size's (start, restart,
	// idle RSS, event, event RSS), zero for the first size.
	Growth [5]float64 `json:"growth"`
	// Met reports the targets at this size: idle RSS, RSS with the event
	// and restart under their targets (judged at 100,000 VMs and above),
	// and each growth at most FleetGrowthTarget per tenfold VMs
	// (FleetGrowthTarget × this size ÷ the previous ÷ 10).
	Met bool `json:"met"`
}

// FleetReport is the result of a fleet mode run.
type FleetReport struct {
	Config FleetConfig `json:"config"`
	Runs   []FleetRun  `json:"runs"`
}

// Fleet measures each API and size of cfg.
func Fleet(ctx context.Context, cfg FleetConfig) (*FleetReport, error) {
	cfg.Runs = max(cfg.Runs, 1)
	rep := &FleetReport{Config: cfg}
	for _, api := range cfg.APIs {
		var prev *FleetRun
		for _, n := range cfg.Sizes {
			best := FleetRun{API: api, VMs: n}
			for i := range cfg.Runs {
				r, err := fleetOnce(ctx, cfg, api, n)
				if err != nil {
					return nil, fmt.Errorf("%s, %d VMs: %w", api, n, err)
				}
				if i == 0 {
					best = *r
				}
				best.Start, best.Restart, best.IdleRSS = min(best.Start, r.Start), min(best.Restart, r.Restart), min(best.IdleRSS, r.IdleRSS)
				best.Event, best.EventRSS = min(best.Event, r.Event), min(best.EventRSS, r.EventRSS)
			}
			best.Met = n < 100000 || (best.IdleRSS < FleetRSSTarget && best.EventRSS < FleetEventRSSTarget && best.Restart < FleetRestartTarget)
			if prev != nil {
				best.Growth = [5]float64{ratio(best.Start, prev.Start), ratio(best.Restart, prev.Restart),
					float64(best.IdleRSS) / float64(max(prev.IdleRSS, 1)), ratio(best.Event, prev.Event),
					float64(best.EventRSS) / float64(max(prev.EventRSS, 1))}
				limit := FleetGrowthTarget * float64(n) / float64(prev.VMs) / 10
				for _, g := range best.Growth {
					best.Met = best.Met && g <= limit
				}
			}
			rep.Runs = append(rep.Runs, best)
			prev = &rep.Runs[len(rep.Runs)-1]
		}
	}
	return rep, nil
}

// measureIdle reads the restarted server c's RSS Settle after its
// start, raises event through its operator API and times it, and reads
// the RSS again Settle later, into r.
func measureIdle(ctx context.Context, cfg FleetConfig, c *child, event string, r *FleetRun) error {
	settled := func() (int64, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(cfg.Settle):
		}
		return c.rss()
	}
	var err error
	if r.IdleRSS, err = settled(); err != nil {
		return err
	}
	begin := time.Now()
	if err := createEvent(ctx, c.admin, event); err != nil {
		return err
	}
	r.Event = time.Since(begin)
	r.EventRSS, err = settled()
	return err
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

// fleetOnce runs the servers of one measurement: a start on an empty
// store, a graceful stop, and a restart on the same store.
func fleetOnce(ctx context.Context, cfg FleetConfig, api string, n int) (*FleetRun, error) {
	dir, err := os.MkdirTemp("", "forewarn-bench-fleet")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(path, []byte(fleet(api, Addrs(cfg.AddrBase, n))), 0o600); err != nil {
		return nil, err
	}
	event := wideEvent(api, n) // made before the clock starts
	r := &FleetRun{API: api, VMs: n}
	for i, took := range []*time.Duration{&r.Start, &r.Restart} {
		begin := time.Now()
		c, err := startServe(cfg.Binary, dir, path)
		if err != nil {
			return nil, err
		}
		*took = time.Since(begin)
		if i == 1 {
			if err := measureIdle(ctx, cfg, c, event, r); err != nil {
				c.stop()
				return nil, err
			}
		}
		// A graceful stop, so that the restart finds the store as a
		// server leaves it.
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if err := c.cmd.Wait(); err != nil {
			return nil, fmt.Errorf("forewarn serve stopped with %w", err)
		}
	}
	return r, nil
}
