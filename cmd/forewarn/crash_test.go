package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

var crashKills = flag.Int("crash.kills", 20, "how many times TestCrashSafety kills the server")

// crashVMs are the VMs of the crash test fleet, two availability sets.
var crashVMs = []struct{ name, ip string }{
	{"c_0", "127.0.0.40"}, {"c_1", "127.0.0.41"}, {"c_2", "127.0.0.42"}, {"c_3", "127.0.0.43"},
	{"d_0", "127.0.0.44"}, {"d_1", "127.0.0.45"},
}

func crashFleet() string {
	var b strings.Builder
	b.WriteString("vms:\n")
	for _, vm := range crashVMs {
		set := "c"
		if vm.name[0] == 'd' {
			set = "d"
		}
		fmt.Fprintf(&b, "  - {name: %s, ip: %s, availabilitySet: %s}\n", vm.name, vm.ip, set)
	}
	return b.String()
}

// crashLedger is what the clients were told before a kill.
type crashLedger struct {
	mu sync.Mutex
	// created holds acknowledged event IDs.
	created map[string]bool
	// approved holds acknowledged approvals: event ID → approver → ack time.
	approved map[string]map[string]time.Time
	// maxInc is the highest incarnation each VM was shown.
	maxInc map[string]int64
	// started holds events a VM was shown as Started.
	started map[string]bool
}

// doc is the part of a scheduled events document the test reads.
type doc struct {
	DocumentIncarnation int64
	Events              []struct{ EventId, EventStatus string }
}

func getDoc(ctx context.Context, s *server, ip string) (*doc, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.metadata+"/metadata/scheduledevents?api-version=2020-07-01", nil)
	req.Header.Set("Metadata", "true")
	resp, err := vmClient(ip).Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return nil, "", fmt.Errorf("GET: %d %v", resp.StatusCode, err)
	}
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, "", err
	}
	return &d, resp.Header.Get("ETag"), nil
}

// etagIncarnation reads the incarnation an ETag like "7-1a2b3c4d" starts with.
func etagIncarnation(t *testing.T, etag string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.SplitN(strings.Trim(etag, `"`), "-", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("ETag %q: %v", etag, err)
	}
	return n
}

// TestCrashSafety kills the server with SIGKILL at random moments while
// operator writes and VM approvals flow, restarts it on the same data and
// checks that nothing acknowledged was lost and nothing went backwards.
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(crashFleet()), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	l := &crashLedger{created: map[string]bool{}, approved: map[string]map[string]time.Time{}, maxInc: map[string]int64{}, started: map[string]bool{}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	t.Logf("seed time %v, %d kills", time.Now().UnixNano(), *crashKills)
	for kill := 0; kill < *crashKills; kill++ {
		s := startServer(t, data, fleet)
		restarted := time.Now()
		crashCheck(t, s, l, restarted)

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		cl := admin.NewClient("http://"+s.adm, &http.Client{Timeout: 5 * time.Second})
		// Operator writers.
		for w := 0; w < 2; w++ {
			wg.Add(1)
			r := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					vm := crashVMs[r.IntN(len(crashVMs))]
					ev, err := cl.CreateEvent(ctx, admin.CreateRequest{Type: "Freeze", VMs: []string{vm.name},
						Notice: fmt.Sprintf("%dms", 200+r.IntN(1500)), Lasts: fmt.Sprintf("%dms", 200+r.IntN(1000)), Source: "User"})
					if err != nil {
						continue
					}
					l.mu.Lock()
					l.created[ev.ID] = true
					l.mu.Unlock()
					if r.IntN(3) == 0 {
						if _, err := cl.Approve(ctx, ev.ID); err == nil {
							l.noteApproval(ev.ID, forewarn.Operator)
						}
					}
				}
			}()
		}
		// VMs: poll, remember what they were shown, approve some events.
		for i, vm := range crashVMs {
			wg.Add(1)
			r := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					d, etag, err := getDoc(ctx, s, vm.ip)
					if err != nil {
						continue
					}
					l.mu.Lock()
					if d.DocumentIncarnation < l.maxInc[vm.name] {
						t.Errorf("%s: incarnation went from %d to %d while serving", vm.name, l.maxInc[vm.name], d.DocumentIncarnation)
					}
					if etagIncarnation(t, etag) != d.DocumentIncarnation {
						t.Errorf("%s: ETag %s for incarnation %d", vm.name, etag, d.DocumentIncarnation)
					}
					l.maxInc[vm.name] = max(l.maxInc[vm.name], d.DocumentIncarnation)
					for _, ev := range d.Events {
						if ev.EventStatus == "Started" {
							l.started[ev.EventId] = true
						}
					}
					l.mu.Unlock()
					for _, ev := range d.Events {
						if ev.EventStatus == "Scheduled" && r.IntN(4) == 0 {
							if code, _ := postApproval(ctx, s, vm.ip, ev.EventId); code == 200 {
								l.noteApproval(ev.EventId, vm.name)
							}
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		s.cmd.Process.Kill() // SIGKILL, mid-flight
		s.cmd.Wait()
		cancel()
		wg.Wait()
		time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond) // some deadlines pass while down
	}
	s := startServer(t, data, fleet)
	crashCheck(t, s, l, time.Now())
	l.mu.Lock()
	t.Logf("%d events created, %d approved, %d seen started", len(l.created), len(l.approved), len(l.started))
	if len(l.created) == 0 || len(l.approved) == 0 {
		t.Errorf("the test drove no traffic: %d events, %d approvals", len(l.created), len(l.approved))
	}
	l.mu.Unlock()
	s.stop(t)
}

func (l *crashLedger) noteApproval(id, by string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.approved[id] == nil {
		l.approved[id] = map[string]time.Time{}
	}
	l.approved[id][by] = time.Now()
}

func postApproval(ctx context.Context, s *server, ip, id string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+s.metadata+"/metadata/scheduledevents?api-version=2020-07-01",
		strings.NewReader(`{"StartRequests":[{"EventId":"`+id+`"}]}`))
	req.Header.Set("Metadata", "true")
	resp, err := vmClient(ip).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// crashCheck checks a freshly started server against the ledger.
func crashCheck(t *testing.T, s *server, l *crashLedger, restarted time.Time) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	cl := admin.NewClient("http://"+s.adm, nil)
	evs, err := cl.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*forewarn.Event{}
	for _, ev := range evs {
		byID[ev.ID] = ev
		// Deadlines that passed while down were applied on start.
		const slack = 500 * time.Millisecond
		switch ev.Status {
		case forewarn.Scheduled:
			if ev.NotBefore.Before(restarted.Add(-slack)) {
				t.Errorf("event %s still Scheduled after restart though its NotBefore %v passed before %v", ev.ID, ev.NotBefore, restarted)
			}
		case forewarn.Started:
			if ev.EndsAt().Before(restarted.Add(-slack)) {
				t.Errorf("event %s still Started after restart though it ended at %v", ev.ID, ev.EndsAt())
			}
		}
	}
	for id := range l.created {
		if byID[id] == nil {
			t.Errorf("acknowledged event %s is gone", id)
		}
	}
	for id, by := range l.approved {
		ev := byID[id]
		if ev == nil {
			t.Errorf("approved event %s is gone", id)
			continue
		}
		for who, at := range by {
			has := false
			for _, a := range ev.Approvals {
				has = has || a.By == who
			}
			// An approval of an event that had already ended records nothing.
			if !has && !(!ev.EndedAt.IsZero() && !ev.EndedAt.After(at)) {
				t.Errorf("approval of %s by %s (acknowledged at %v) was lost: %+v", id, who, at, ev)
			}
		}
	}
	for id := range l.started {
		if ev := byID[id]; ev == nil || ev.Status == forewarn.Scheduled || ev.Status == forewarn.Pending {
			t.Errorf("event %s was shown Started, and is now %v", id, ev)
		}
	}
	for _, vm := range crashVMs {
		d, etag, err := getDoc(context.Background(), s, vm.ip)
		if err != nil {
			t.Fatal(err)
		}
		if d.DocumentIncarnation < l.maxInc[vm.name] || etagIncarnation(t, etag) < l.maxInc[vm.name] {
			t.Errorf("%s: incarnation %d (ETag %s) after restart, was shown %d", vm.name, d.DocumentIncarnation, etag, l.maxInc[vm.name])
		}
	}
}
