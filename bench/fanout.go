package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// FanoutConfig configures a long-poll fan-out run.
type FanoutConfig struct {
	// Waiters is the number of GCE VMs, each holding one long-poll on
	// maintenance-event from its own address.
	Waiters  int        `json:"waiters"`
	AddrBase netip.Addr `json:"addrBase"`
	// Settle is how long to wait for the server to hold every waiter.
	Settle time.Duration `json:"settle"`
	Binary string        `json:"-"`
}

// FanoutReport is the result of a fan-out run.
type FanoutReport struct {
	Config    FanoutConfig `json:"config"`
	Delivered int          `json:"delivered"`
	// Delay is from the operator's request that flips every VM's key to
	// each waiter's answer.
	Delay Latency `json:"delay"`
	// RSSIdle and RSSHeld are the server's resident memory once every
	// waiter has connected and read its key, and while their long-polls
	// are all held.
	RSSIdle        int64   `json:"rssIdleBytes"`
	RSSHeld        int64   `json:"rssHeldBytes"`
	BytesPerWaiter float64 `json:"bytesPerWaiter"`
	// FlipRequest is how long the operator's request took, and ServerCPU
	// the server's CPU time from that request until every answer arrived.
	FlipRequest time.Duration `json:"flipRequest"`
	ServerCPU   time.Duration `json:"serverCPU"`
}

// Fanout holds one long-poll per GCE VM, flips every VM's
// maintenance-event with one event, and measures how long each answer
// takes and what a held waiter costs the server.
func Fanout(ctx context.Context, cfg FanoutConfig) (*FanoutReport, error) {
	cfg.Waiters = max(cfg.Waiters, 1)
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Second
	}
	addrs := Addrs(cfg.AddrBase, cfg.Waiters)
	srv, err := startForewarn(cfg.Binary, fleet("gce", addrs), "--max-long-polls", "0", "--rate-limit", "0", "--gce-rate-limit", "0")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rep := &FanoutReport{Config: cfg}

	// The current ETag of maintenance-event (NONE), read once per VM:
	// reading it also makes the VM one that watches its key.
	plain := []byte("GET /computeMetadata/v1/instance/maintenance-event HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n")
	conns := make([]*conn, len(addrs))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	var etag string
	for i, a := range addrs {
		c, err := dial(ctx, a, srv.metadata, plain)
		if err != nil {
			return nil, err
		}
		conns[i] = c
		status, e, _, err := c.do("ETag")
		if err != nil || status != 200 {
			return nil, fmt.Errorf("GET from %s: %d %v", a, status, err)
		}
		etag = e
	}
	time.Sleep(cfg.Settle / 2)
	if rep.RSSIdle, err = srv.rss(); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	answers, err := holdLongPolls(conns, func(int) string { return etag }, &wg)
	if err != nil {
		return nil, err
	}
	time.Sleep(cfg.Settle)
	if rep.RSSHeld, err = srv.rss(); err != nil {
		return nil, err
	}
	rep.BytesPerWaiter = float64(rep.RSSHeld-rep.RSSIdle) / float64(cfg.Waiters)

	names := make([]string, len(addrs))
	for i := range names {
		names[i] = fmt.Sprintf("vm%d", i)
	}
	vms, _ := json.Marshal(names)
	cpu0, _ := srv.cpu()
	flip := time.Now()
	if err := createEvent(ctx, srv.admin, `{"type":"MIGRATE_ON_HOST_MAINTENANCE","started":true,"lasts":"1h","vms":`+string(vms)+`}`); err != nil {
		return nil, err
	}
	rep.FlipRequest = time.Since(flip)
	woke, err := awaitMigrations(ctx, answers, len(conns))
	if err != nil {
		return nil, err
	}
	delays := make([]time.Duration, len(woke))
	for i, at := range woke {
		delays[i] = at.Sub(flip)
	}
	wg.Wait()
	cpu1, _ := srv.cpu()
	rep.ServerCPU = cpu1 - cpu0
	rep.Delivered = len(delays)
	rep.Delay = summarize(delays)
	return rep, nil
}

// wake is one held long-poll's answer.
type wake struct {
	at    time.Time
	value string
	err   error
}

// holdLongPolls sends each connection a wait_for_change long-poll of its
// maintenance-event key with last_etag etag(i), and returns the channel
// its answer will arrive on; wg counts the goroutines reading them.
func holdLongPolls(conns []*conn, etag func(i int) string, wg *sync.WaitGroup) (<-chan wake, error) {
	answers := make(chan wake, len(conns))
	for i, c := range conns {
		wait := "GET /computeMetadata/v1/instance/maintenance-event?wait_for_change=true&last_etag=" + etag(i) +
			" HTTP/1.1\r\nHost: metadata.google.internal\r\nMetadata-Flavor: Google\r\n\r\n"
		if _, err := c.c.Write([]byte(wait)); err != nil {
			return nil, err
		}
		wg.Go(func() {
			status, _, body, err := readResponse(c.r, "ETag")
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("status %d", status)
			}
			answers <- wake{time.Now(), string(body), err}
		})
	}
	return answers, nil
}

// awaitMigrations waits, for at most 60 s, for n answers that each read
// the live migration, and returns when each came.
func awaitMigrations(ctx context.Context, answers <-chan wake, n int) ([]time.Time, error) {
	woke := make([]time.Time, 0, n)
	timeout := time.After(60 * time.Second)
	for range n {
		select {
		case a := <-answers:
			if a.err != nil {
				return nil, fmt.Errorf("waiter: %w", a.err)
			}
			if !strings.HasPrefix(a.value, "MIGRATE_ON_HOST_MAINTENANCE") {
				return nil, fmt.Errorf("waiter got %q", a.value)
			}
			woke = append(woke, a.at)
		case <-timeout:
			return nil, fmt.Errorf("%d of %d waiters answered in 60 s", len(woke), n)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return woke, nil
}
