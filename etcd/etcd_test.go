package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/etcd"
	"github.com/forewarn/forewarn/internal/etcdtest"
	"github.com/forewarn/forewarn/storetest"
)

// wait bounds every wait for something a test expects: a deadline for a
// failing store, never a sleep.
const wait = 10 * time.Second

// prefixes numbers the key prefixes tests take on a shared etcd, so each
// starts from an empty store.
var prefixes atomic.Int64

// open opens a store on a fresh prefix of the etcd at endpoints (or on
// prefix, when given), closed when t ends.
func open(t *testing.T, endpoints []string, prefix string, opts ...func(*etcd.Options)) *etcd.Store {
	t.Helper()
	if prefix == "" {
		prefix = fmt.Sprintf("/test/%d/", prefixes.Add(1))
	}
	o := etcd.Options{Endpoints: endpoints, Prefix: prefix}
	for _, f := range opts {
		f(&o)
	}
	s, err := etcd.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestStore runs the conformance suite, every store on a fresh prefix of
// one etcd.
func TestStore(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T) forewarn.Store { return open(t, srv.Endpoints(), "") })
}

// TestDurable runs the conformance suite's reopen cases: a store opened
// again on the prefix of one closed, the prefix named after the suite's
// directory.
func TestDurable(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	storetest.RunDurable(t, func(t *testing.T, dir string) forewarn.Store {
		return open(t, srv.Endpoints(), "/durable"+dir+"/")
	})
}

// TestEtcd runs the tests that share one etcd server.
func TestEtcd(t *testing.T) {
	t.Parallel()
	eps := etcdtest.Start(t).Endpoints()
	t.Run("TwoStores", func(t *testing.T) { testTwoStores(t, eps) })
	t.Run("Compaction", func(t *testing.T) { testCompaction(t, eps) })
	t.Run("Campaign", func(t *testing.T) { testCampaign(t, eps) })
	t.Run("LeaseLost", func(t *testing.T) { testLeaseLost(t, eps) })
	t.Run("Replicas", func(t *testing.T) { testReplicas(t, eps) })
	t.Run("BadFence", func(t *testing.T) { testBadFence(t, eps) })
	t.Run("FleetWide", func(t *testing.T) { testFleetWide(t, eps) })
	t.Run("FleetInventory", func(t *testing.T) { testFleetInventory(t, eps) })
}

// testTwoStores checks that two stores on one prefix see each other's
// commits, through Load and Follow, and conflict as one store.
func testTwoStores(t *testing.T, eps []string) {
	a := open(t, eps, "")
	b := open(t, eps, a.Prefix())
	ctx := t.Context()
	fa, fb := a.Follow(ctx, 0), b.Follow(ctx, 0)

	c1 := &forewarn.Change{Events: []*forewarn.Event{event(1)}, Incarnations: map[string]int64{"vm-a": 1}}
	commit(t, a, c1, 1)
	wantUpdate(t, recv(t, fb), 1, c1)
	wantUpdate(t, recv(t, fa), 1, c1)

	c2 := &forewarn.Change{Revision: 1, Deletes: []string{event(1).ID}, Incarnations: map[string]int64{"vm-a": 2}}
	commit(t, b, c2, 2)
	wantUpdate(t, recv(t, fa), 2, c2)
	wantUpdate(t, recv(t, fb), 2, c2)

	st, err := a.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if st.Revision != 2 || len(st.Events) != 0 || st.Incarnations["vm-a"] != 2 {
		t.Errorf("Load after the other store's commit: revision %d, events %v, incarnations %v; want 2, none, vm-a 2",
			st.Revision, st.Events, st.Incarnations)
	}
	_, err = a.Commit(ctx, &forewarn.Change{Revision: 1})
	wantCode(t, err, forewarn.ECONFLICT)

	// A store opened later follows from the revision it loaded.
	c := open(t, eps, a.Prefix())
	st, err = c.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	fc := c.Follow(ctx, st.Revision)
	c3 := &forewarn.Change{Revision: 2, VMs: map[string]*forewarn.VMRecord{"vm-a": {Peers: "p"}}}
	commit(t, a, c3, 3)
	wantUpdate(t, recv(t, fc), 3, c3)
}

// testCompaction checks that a follower needing compacted revisions is
// told to reload, and that followers already caught up carry on.
func testCompaction(t *testing.T, eps []string) {
	s := open(t, eps, "")
	ctx := t.Context()
	for rev := range int64(3) {
		commit(t, s, &forewarn.Change{Revision: rev, Incarnations: map[string]int64{"vm-a": rev + 1}}, rev+1)
	}
	live := s.Follow(ctx, 3)

	cli := s.Client()
	resp, err := cli.Get(ctx, s.Prefix()+"rev")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact: %v", err)
	}

	f := s.Follow(ctx, 1)
	if u := recv(t, f); !u.Reload || u.Change != nil {
		t.Fatalf("Follow from a compacted revision delivered %+v, want Reload", *u)
	}
	waitClosed(t, f)

	c4 := &forewarn.Change{Revision: 3, Incarnations: map[string]int64{"vm-a": 4}}
	commit(t, s, c4, 4)
	wantUpdate(t, recv(t, live), 4, c4)
	// Following from the current revision needs nothing compacted.
	f = s.Follow(ctx, 4)
	c5 := &forewarn.Change{Revision: 4}
	commit(t, s, c5, 5)
	wantUpdate(t, recv(t, f), 5, c5)
}

// testCampaign checks that one of two contenders leads at a time, that
// the other leads once the first resigns or closes, and that a deposed
// leader's fence is refused.
func testCampaign(t *testing.T, eps []string) {
	a := open(t, eps, "")
	b := open(t, eps, a.Prefix())
	ctx := t.Context()

	ta, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign a: %v", err)
	}
	won := make(chan forewarn.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Errorf("Campaign b: %v", err)
		}
		won <- tb
	}()
	wantLeader(t, b, "a")
	select {
	case <-won:
		t.Fatal("b leads while a leads")
	default:
	}
	ses := storetest.Session("ses-a", 3)
	commit(t, b, &forewarn.Change{Fence: ta.Fence(), Sessions: map[string]*forewarn.Session{"ses-a": ses}}, 1)

	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	wantDone(t, ta)
	var tb forewarn.Term
	select {
	case tb = <-won:
	case <-time.After(wait):
		t.Fatalf("b does not lead within %v of a resigning", wait)
	}
	if tb == nil {
		t.FailNow()
	}
	wantLeader(t, a, "b")
	_, err = a.Commit(ctx, &forewarn.Change{Revision: 1, Fence: ta.Fence(),
		Sessions: map[string]*forewarn.Session{"ses-a": nil, "ses-b": storetest.Session("ses-b", 3)}})
	wantCode(t, err, forewarn.ECONFLICT)
	if !strings.Contains(err.Error(), "leadership lost") {
		t.Errorf("a deposed leader's commit failed with %q, want it to say leadership lost", err)
	}
	// It wrote nothing: the session it removed is there, the one it set
	// is not.
	st, err := a.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := st.Sessions["ses-a"]; len(st.Sessions) != 1 || got == nil || !reflect.DeepEqual(got, ses.Normalized()) {
		t.Errorf("Load after a deposed leader's commit: sessions %v, want only ses-a as committed", st.Sessions)
	}
	// A conflict on the revision is told as such, fence or not.
	_, err = a.Commit(ctx, &forewarn.Change{Revision: 0, Fence: tb.Fence()})
	wantCode(t, err, forewarn.ECONFLICT)
	commit(t, a, &forewarn.Change{Revision: 1, Fence: tb.Fence()}, 2)

	// a campaigns again, and leads once b's store closes.
	won2 := make(chan forewarn.Term, 1)
	go func() {
		ta, err := a.Campaign(ctx, "a")
		if err != nil {
			t.Errorf("Campaign a again: %v", err)
		}
		won2 <- ta
	}()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantDone(t, tb)
	var ta2 forewarn.Term
	select {
	case ta2 = <-won2:
	case <-time.After(wait):
		t.Fatalf("a does not lead within %v of b closing", wait)
	}
	if ta2 == nil {
		t.FailNow()
	}
	wantLeader(t, a, "a")
	_, err = a.Commit(ctx, &forewarn.Change{Revision: 2, Fence: tb.Fence()})
	wantCode(t, err, forewarn.ECONFLICT)
	_, err = a.Commit(ctx, &forewarn.Change{Revision: 2, Fence: ta.Fence()})
	wantCode(t, err, forewarn.ECONFLICT)
	commit(t, a, &forewarn.Change{Revision: 2, Fence: ta2.Fence()}, 3)

	// A campaign gives up when its context ends.
	c := open(t, eps, a.Prefix())
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Campaign(cctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Campaign while another leads, until its context ends: err = %v, want context.DeadlineExceeded", err)
	}
	wantLeader(t, c, "a")
}

// testLeaseLost checks that a term whose lease is gone, as when it
// expires, ends, and that its fence is refused.
func testLeaseLost(t *testing.T, eps []string) {
	s := open(t, eps, "", func(o *etcd.Options) { o.LeaseTTL = time.Second })
	ctx := t.Context()
	term, err := s.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	commit(t, s, &forewarn.Change{Fence: term.Fence()}, 1)

	// Revoke every lease, as etcd does when one expires.
	leases, err := s.Client().Leases(ctx)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	for _, l := range leases.Leases {
		if _, err := s.Client().Revoke(ctx, l.ID); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
	}
	_, err = s.Commit(ctx, &forewarn.Change{Revision: 1, Fence: term.Fence()})
	wantCode(t, err, forewarn.ECONFLICT)
	wantDone(t, term)
	wantLeader(t, s, "")
	commit(t, s, &forewarn.Change{Revision: 1}, 2) // without a fence
}

// testReplicas checks announcements: replaced by name, shown with the
// leader and the revision, and gone when their store closes.
func testReplicas(t *testing.T, eps []string) {
	a := open(t, eps, "")
	b := open(t, eps, a.Prefix())
	ctx := t.Context()
	started := time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))
	ra := forewarn.Replica{Name: "a", Address: "10.0.0.1:8080", Revision: 0, Started: started, Updated: started}
	rb := forewarn.Replica{Name: "b", Revision: 0, Started: started, Updated: started}
	for _, x := range []struct {
		s *etcd.Store
		r forewarn.Replica
	}{{a, ra}, {b, rb}} {
		if err := x.s.Announce(ctx, x.r); err != nil {
			t.Fatalf("Announce %s: %v", x.r.Name, err)
		}
	}
	wantReplicas(t, b, &forewarn.ClusterStatus{Replicas: []forewarn.Replica{ra, rb}})

	if _, err := b.Campaign(ctx, "b"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	commit(t, a, &forewarn.Change{}, 1)
	rb.Leader, rb.Revision, rb.Updated = true, 1, started.Add(time.Minute)
	if err := b.Announce(ctx, rb); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	wantReplicas(t, a, &forewarn.ClusterStatus{Revision: 1, Leader: "b", Replicas: []forewarn.Replica{ra, rb}})

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantReplicas(t, a, &forewarn.ClusterStatus{Revision: 1, Replicas: []forewarn.Replica{ra}})

	err := a.Announce(ctx, forewarn.Replica{})
	wantCode(t, err, forewarn.EINVALID)
	_, err = a.Campaign(ctx, "")
	wantCode(t, err, forewarn.EINVALID)
	_, err = b.Replicas(ctx)
	wantCode(t, err, forewarn.EUNAVAILABLE)
}

// testBadFence checks that a fence not made by a term of the store is
// refused as invalid, before anything is written.
func testBadFence(t *testing.T, eps []string) {
	s := open(t, eps, "")
	other := open(t, eps, "")
	term, err := other.Campaign(t.Context(), "x")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	for _, f := range []string{"x", "@1", s.Prefix() + "leader/1", s.Prefix() + "leader/1@x", s.Prefix() + "leader/1@0", term.Fence()} {
		_, err := s.Commit(t.Context(), &forewarn.Change{Fence: f})
		wantCode(t, err, forewarn.EINVALID)
	}
	st, err := s.Load(t.Context())
	if err != nil || st.Revision != 0 {
		t.Fatalf("Load after refused commits: %v, %v; want revision 0", st, err)
	}
}

// testFleetWide commits a fleet-wide change, an event naming 100,000 VMs
// and 100,000 incarnations, in one transaction, and reads it back
// through Load and Follow.
func testFleetWide(t *testing.T, eps []string) {
	const n = 100000
	// A fleet-wide commit takes etcd a second or two: more on a slow
	// machine, with the race detector.
	s := open(t, eps, "", func(o *etcd.Options) { o.RequestTimeout = time.Minute })
	ctx := t.Context()
	f := s.Follow(ctx, 0)
	e := event(1)
	e.Resources = make([]string, n)
	incs := make(map[string]int64, n)
	for i := range n {
		vm := fmt.Sprintf("vm-%06d", i)
		e.Resources[i] = vm
		incs[vm] = 1
	}
	c := &forewarn.Change{Events: []*forewarn.Event{e}, Incarnations: incs}

	start := time.Now()
	commit(t, s, c, 1)
	committed := time.Since(start)
	wantUpdate(t, recv(t, f), 1, c)
	followed := time.Since(start)
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	loaded := time.Since(start) - followed
	if st.Revision != 1 || len(st.Incarnations) != n || len(st.Events) != 1 || len(st.Events[0].Resources) != n {
		t.Fatalf("Load: revision %d, %d incarnations, %d events; want 1, %d, 1 naming %d VMs",
			st.Revision, len(st.Incarnations), len(st.Events), n, n)
	}

	// The next fleet-wide change reads every incarnation to check it.
	for vm := range incs {
		incs[vm] = 2
	}
	start = time.Now()
	commit(t, s, &forewarn.Change{Revision: 1, Incarnations: incs}, 2)
	again := time.Since(start)
	t.Logf("%d VMs: commit %v, follow %v, load %v, commit again %v", n, committed, followed, loaded, again)
	incs["vm-000000"] = 1
	_, err = s.Commit(ctx, &forewarn.Change{Revision: 2, Incarnations: incs})
	wantCode(t, err, forewarn.EINVALID)
}

// testFleetInventory defines 100,000 VMs in one commit, reads them back
// through Follow and Load, and removes them all in another.
func testFleetInventory(t *testing.T, eps []string) {
	const n = 100000
	s := open(t, eps, "", func(o *etcd.Options) { o.RequestTimeout = time.Minute })
	ctx := t.Context()
	f := s.Follow(ctx, 0)
	defs := storetest.Definitions(n)
	c := &forewarn.Change{Inventory: defs}

	start := time.Now()
	commit(t, s, c, 1)
	committed := time.Since(start)
	u := recv(t, f)
	followed := time.Since(start)
	wantUpdate(t, u, 1, c)
	start = time.Now()
	st, err := s.Load(ctx)
	loaded := time.Since(start)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if st.Revision != 1 || st.InventoryRevision != 1 || len(st.Inventory) != n {
		t.Fatalf("Load: revision %d, inventory revision %d, %d definitions; want 1, 1, %d",
			st.Revision, st.InventoryRevision, len(st.Inventory), n)
	}
	for _, name := range []string{"vm-000000", "vm-054321", "vm-099999"} {
		for what, d := range map[string]*forewarn.Definition{"Load": st.Inventory[name], "Follow": u.Change.Inventory[name]} {
			if d == nil || *d.VM != *defs[name].VM || d.Seq != defs[name].Seq {
				t.Errorf("%s: definition of %s = %+v, want %+v", what, name, d, defs[name])
			}
		}
	}

	remove := make(map[string]*forewarn.Definition, n)
	for name := range defs {
		remove[name] = nil
	}
	c = &forewarn.Change{Revision: 1, Inventory: remove}
	start = time.Now()
	commit(t, s, c, 2)
	removed := time.Since(start)
	wantUpdate(t, recv(t, f), 2, c)
	st, err = s.Load(ctx)
	if err != nil || st.InventoryRevision != 2 || len(st.Inventory) != 0 {
		t.Fatalf("Load after removing every definition: %v; want inventory revision 2 and no definitions", err)
	}
	t.Logf("%d definitions: commit %v, follow %v, load %v, remove all %v", n, committed, followed, loaded, removed)
}

// TestTooLarge checks that a change larger than etcd's limits (here its
// defaults) is refused with EINVALID naming the flags to raise, and
// nothing is written; and that a full etcd refuses commits with
// ENOSPACE.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	const quota = 4 << 20
	srv := etcdtest.Start(t, "--max-txn-ops=128", "--max-request-bytes=1572864", fmt.Sprintf("--quota-backend-bytes=%d", quota))
	s := open(t, srv.Endpoints(), "")
	incs := make(map[string]int64)
	for i := range 200 {
		incs[fmt.Sprintf("vm-%d", i)] = 1
	}
	defs := make(map[string]*forewarn.Definition)
	for i := range 200 {
		name := fmt.Sprintf("vm-%d", i)
		defs[name] = &forewarn.Definition{VM: &forewarn.VM{Name: name}, Seq: int64(i + 1)}
	}
	big := event(1)
	big.Description = strings.Repeat("x", 2<<20)
	for name, c := range map[string]*forewarn.Change{
		"too many operations":  {Incarnations: incs},
		"too many definitions": {Inventory: defs},
		"too many bytes":       {Events: []*forewarn.Event{big}},
	} {
		_, err := s.Commit(t.Context(), c)
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.Contains(err.Error(), "--max-txn-ops") ||
			!strings.Contains(err.Error(), "--max-request-bytes") {
			t.Errorf("%s: Commit err = %v, want EINVALID naming --max-txn-ops and --max-request-bytes", name, err)
		}
	}
	st, err := s.Load(t.Context())
	if err != nil || st.Revision != 0 {
		t.Fatalf("Load after refused commits: %v, %v; want revision 0", st, err)
	}
	commit(t, s, &forewarn.Change{Incarnations: map[string]int64{"vm-a": 1}}, 1)

	// Changes of 1 MiB each, with every version kept, fill the quota.
	big.Description = strings.Repeat("x", 1<<20)
	for rev := int64(1); ; rev++ {
		_, err := s.Commit(t.Context(), &forewarn.Change{Revision: rev, Events: []*forewarn.Event{big}})
		if err == nil {
			if rev > 2*quota>>20 {
				t.Fatalf("%d MiB committed into a quota of %d MiB", rev, quota>>20)
			}
			continue
		}
		wantCode(t, err, forewarn.ENOSPACE)
		if !strings.Contains(err.Error(), "--quota-backend-bytes") {
			t.Errorf("Commit err = %v, want it to name --quota-backend-bytes", err)
		}
		break
	}
	if _, err := s.Load(t.Context()); err != nil {
		t.Errorf("Load from a full etcd: %v", err)
	}
}

// TestSessionsDefaultLimits checks the bound etcd's default
// --max-request-bytes (1.5 MiB) puts on sessions, which are one key each,
// written whole: four sessions of 1,000 hosts (some 300 KB each) commit
// in one change and come back whole through Load and Follow, as does one
// of 4,500 hosts; one of 5,000 hosts is refused with EINVALID naming the
// flags, and writes nothing.
func TestSessionsDefaultLimits(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t, "--max-txn-ops=128", "--max-request-bytes=1572864")
	s := open(t, srv.Endpoints(), "")
	ctx := t.Context()
	f := s.Follow(ctx, 0)
	sessions := make(map[string]*forewarn.Session)
	for i := range 4 {
		id := fmt.Sprintf("ses-%d", i)
		sessions[id] = storetest.Session(id, 1000)
	}
	c := &forewarn.Change{Sessions: sessions}
	commit(t, s, c, 1)
	u := recv(t, f)
	wantUpdate(t, u, 1, c)
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for id, w := range sessions {
		for what, g := range map[string]*forewarn.Session{"Load": st.Sessions[id], "Follow": u.Change.Sessions[id]} {
			if !reflect.DeepEqual(g, w.Normalized()) {
				t.Errorf("%s: session %s differs from the one committed", what, id)
			}
		}
	}

	_, err = s.Commit(ctx, &forewarn.Change{Revision: 1, Sessions: map[string]*forewarn.Session{"ses-big": storetest.Session("ses-big", 5000)}})
	if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.Contains(err.Error(), "--max-request-bytes") {
		t.Errorf("Commit of a session of 5,000 hosts: err = %v, want EINVALID naming --max-request-bytes", err)
	}
	if st, err = s.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if st.Revision != 1 || len(st.Sessions) != 4 || st.Sessions["ses-big"] != nil {
		t.Fatalf("Load after a refused commit: revision %d, %d sessions; want revision 1 and the 4 sessions", st.Revision, len(st.Sessions))
	}
	c = &forewarn.Change{Revision: 1, Sessions: map[string]*forewarn.Session{"ses-0": nil, "ses-big": storetest.Session("ses-big", 4500)}}
	commit(t, s, c, 2)
	wantUpdate(t, recv(t, f), 2, c)
}

// TestUnavailable checks a store whose etcd stops: calls fail with
// EUNAVAILABLE within RequestTimeout, a term ends within its lease, and
// once etcd is back the store commits again and its follower carries on.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	const timeout = time.Second
	s := open(t, srv.Endpoints(), "", func(o *etcd.Options) {
		o.RequestTimeout, o.DialTimeout, o.LeaseTTL = timeout, timeout, time.Second
	})
	ctx := t.Context()
	f := s.Follow(ctx, 0)
	c1 := &forewarn.Change{Incarnations: map[string]int64{"vm-a": 1}}
	commit(t, s, c1, 1)
	wantUpdate(t, recv(t, f), 1, c1)
	term, err := s.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}

	srv.Stop()
	start := time.Now()
	_, err = s.Commit(ctx, &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 2}, Fence: term.Fence()})
	took := time.Since(start)
	wantCode(t, err, forewarn.EUNAVAILABLE)
	if took > timeout+time.Second {
		t.Errorf("Commit failed after %v, want within %v", took, timeout+time.Second)
	}
	if !strings.Contains(err.Error(), "etcd unavailable") {
		t.Errorf("Commit err = %v, want it to say etcd unavailable", err)
	}
	_, err = s.Load(ctx)
	wantCode(t, err, forewarn.EUNAVAILABLE)
	_, err = s.Replicas(ctx)
	wantCode(t, err, forewarn.EUNAVAILABLE)
	wantDone(t, term)

	// Open fails too, within its DialTimeout.
	start = time.Now()
	_, err = etcd.Open(ctx, etcd.Options{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	wantCode(t, err, forewarn.EUNAVAILABLE)
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("Open failed after %v, want within %v", took, timeout+time.Second)
	}

	srv.Restart()
	c2 := &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 2}}
	commitAvailable(t, s, c2, 2)
	wantUpdate(t, recv(t, f), 2, c2)

	// The term ended here when etcd went, but etcd, restarted, gives
	// every lease a new LeaseTTL: the old election key, and so its
	// fence, lasts until then. No one else leads meanwhile.
	for deadline := time.Now().Add(wait); ; {
		st, err := s.Replicas(ctx)
		if err != nil {
			t.Fatalf("Replicas: %v", err)
		}
		if st.Leader == "" {
			break
		}
		if st.Leader != "a" || time.Now().After(deadline) {
			t.Fatalf("leader %q %v after etcd restarted, want the old term's to lapse", st.Leader, wait)
		}
	}
	_, err = s.Commit(ctx, &forewarn.Change{Revision: 2, Fence: term.Fence()})
	wantCode(t, err, forewarn.ECONFLICT)
}

// TestCluster runs a store on a three-member etcd: it commits and its
// follower follows while one member is down, and a store without a
// quorum fails with EUNAVAILABLE.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartCluster(t, 3)
	s := open(t, c.Endpoints(), "", func(o *etcd.Options) { o.RequestTimeout = time.Second })
	ctx := t.Context()
	f := s.Follow(ctx, 0)
	c1 := &forewarn.Change{Incarnations: map[string]int64{"vm-a": 1}}
	commit(t, s, c1, 1)
	wantUpdate(t, recv(t, f), 1, c1)

	c.Kill(0)
	c2 := &forewarn.Change{Revision: 1, Incarnations: map[string]int64{"vm-a": 2}}
	commitAvailable(t, s, c2, 2)
	wantUpdate(t, recv(t, f), 2, c2)

	c.Stop(1)
	_, err := s.Commit(ctx, &forewarn.Change{Revision: 2})
	wantCode(t, err, forewarn.EUNAVAILABLE)
	if !strings.Contains(err.Error(), "no quorum") {
		t.Errorf("Commit without a quorum: err = %v, want it to say no quorum", err)
	}

	// The commit that timed out may still land once the quorum is back:
	// its outcome is unknown, as the package says. A commit against the
	// revision it was computed for conflicts then; nothing is applied
	// twice.
	c.Restart(0)
	var rev int64
	for deadline := time.Now().Add(wait); ; {
		st, err := s.Load(ctx)
		if err == nil {
			rev = st.Revision
			break
		}
		if forewarn.ErrorCode(err) != forewarn.EUNAVAILABLE || time.Now().After(deadline) {
			t.Fatalf("Load once the quorum is back: %v", err)
		}
	}
	switch rev {
	case 2:
		t.Log("the commit that timed out without a quorum was dropped")
	case 3:
		t.Log("the commit that timed out without a quorum landed once it was back")
		wantUpdate(t, recv(t, f), 3, &forewarn.Change{Revision: 2})
	default:
		t.Fatalf("revision %d once the quorum is back, want 2 or 3", rev)
	}
	c3 := &forewarn.Change{Revision: rev, Incarnations: map[string]int64{"vm-a": 3}}
	commitAvailable(t, s, c3, rev+1)
	wantUpdate(t, recv(t, f), rev+1, c3)
}

// commitAvailable commits c, trying again while etcd is unavailable (a
// member down, a leader being elected), for up to wait.
func commitAvailable(t *testing.T, s forewarn.Store, c *forewarn.Change, want int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		rev, err := s.Commit(t.Context(), c)
		if forewarn.ErrorCode(err) == forewarn.EUNAVAILABLE && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			t.Fatalf("Commit(revision %d): %v", c.Revision, err)
		}
		if rev != want {
			t.Fatalf("Commit returned revision %d, want %d", rev, want)
		}
		return
	}
}

// TestOpen checks Open's refusals: bad options, and endpoints where
// nothing answers.
func TestOpen(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]etcd.Options{
		"no endpoints":     {},
		"negative timeout": {Endpoints: []string{"http://127.0.0.1:1"}, RequestTimeout: -time.Second},
		"fractional lease": {Endpoints: []string{"http://127.0.0.1:1"}, LeaseTTL: 1500 * time.Millisecond},
		"negative lease":   {Endpoints: []string{"http://127.0.0.1:1"}, LeaseTTL: -time.Second},
		"negative dial":    {Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: -1},
	} {
		_, err := etcd.Open(t.Context(), o)
		if forewarn.ErrorCode(err) != forewarn.EINVALID {
			t.Errorf("%s: Open err = %v, want code %q", name, err, forewarn.EINVALID)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	start := time.Now()
	_, err = etcd.Open(t.Context(), etcd.Options{Endpoints: []string{ep}, DialTimeout: 500 * time.Millisecond})
	wantCode(t, err, forewarn.EUNAVAILABLE)
	if !strings.Contains(err.Error(), ep) {
		t.Errorf("Open err = %v, want it to name %s", err, ep)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Open failed after %v, want within 1.5s", took)
	}
}

// event returns the n-th test event.
func event(n int) *forewarn.Event {
	return &forewarn.Event{
		ID:        fmt.Sprintf("0B4A4C61-2A5F-4E0C-9C5B-%012X", n),
		Type:      forewarn.Reboot,
		Status:    forewarn.Scheduled,
		Resources: []string{"vm-a"},
		NotBefore: time.Date(2026, 3, 1, 9, 15, 0, 0, time.UTC),
		Duration:  -1,
		Source:    forewarn.Platform,
		Created:   time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC),
	}
}

func commit(t *testing.T, s forewarn.Store, c *forewarn.Change, want int64) {
	t.Helper()
	rev, err := s.Commit(t.Context(), c)
	if err != nil {
		t.Fatalf("Commit(revision %d): %v", c.Revision, err)
	}
	if rev != want {
		t.Fatalf("Commit returned revision %d, want %d", rev, want)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := forewarn.ErrorCode(err); got != code {
		t.Fatalf("err = %v (code %q), want code %q", err, got, code)
	}
}

func recv(t *testing.T, f <-chan *forewarn.Update) *forewarn.Update {
	t.Helper()
	select {
	case u, ok := <-f:
		if !ok {
			t.Fatal("Follow channel closed, want an update")
		}
		return u
	case <-time.After(wait):
		t.Fatalf("no update from Follow within %v", wait)
	}
	return nil
}

func waitClosed(t *testing.T, f <-chan *forewarn.Update) {
	t.Helper()
	select {
	case u, ok := <-f:
		if ok {
			t.Fatalf("Follow delivered %+v, want it closed", *u)
		}
	case <-time.After(wait):
		t.Fatalf("Follow channel still open after %v", wait)
	}
}

// wantUpdate checks u's revisions and the sizes of what it wrote; the
// conformance suite checks contents.
func wantUpdate(t *testing.T, u *forewarn.Update, rev int64, c *forewarn.Change) {
	t.Helper()
	if u.Reload || u.Change == nil || u.Revision != rev || u.Change.Revision != rev-1 {
		t.Fatalf("Follow delivered %+v, want revision %d", *u, rev)
	}
	g := u.Change
	if len(g.Events) != len(c.Events) || len(g.Deletes) != len(c.Deletes) || len(g.Incarnations) != len(c.Incarnations) ||
		len(g.VMs) != len(c.VMs) || len(g.ScaleSets) != len(c.ScaleSets) ||
		len(g.Inventory) != len(c.Inventory) || len(g.InventorySets) != len(c.InventorySets) || len(g.Sessions) != len(c.Sessions) {
		t.Fatalf("revision %d: Follow delivered %d events, %d deletes, %d incarnations, %d VMs, %d scale sets, "+
			"%d definitions, %d scale set definitions, %d sessions; want %d, %d, %d, %d, %d, %d, %d, %d",
			rev, len(g.Events), len(g.Deletes), len(g.Incarnations), len(g.VMs), len(g.ScaleSets), len(g.Inventory), len(g.InventorySets), len(g.Sessions),
			len(c.Events), len(c.Deletes), len(c.Incarnations), len(c.VMs), len(c.ScaleSets), len(c.Inventory), len(c.InventorySets), len(c.Sessions))
	}
	for id, ses := range c.Sessions {
		if gs, ok := g.Sessions[id]; !ok || (gs == nil) != (ses == nil) || ses != nil && len(gs.Hosts) != len(ses.Hosts) {
			t.Fatalf("revision %d: session %s = %v (present %t), want %v", rev, id, gs, ok, ses)
		}
	}
	for name, d := range c.Inventory {
		if gd, ok := g.Inventory[name]; !ok || (gd == nil) != (d == nil) {
			t.Fatalf("revision %d: definition of %s = %v (present %t), want %v", rev, name, gd, ok, d)
		}
	}
	for vm, n := range c.Incarnations {
		if g.Incarnations[vm] != n {
			t.Fatalf("revision %d: incarnation of %s = %d, want %d", rev, vm, g.Incarnations[vm], n)
		}
	}
	for i, e := range c.Events {
		if g.Events[i].ID != e.ID || len(g.Events[i].Resources) != len(e.Resources) {
			t.Fatalf("revision %d: event %d is %s naming %d VMs, want %s naming %d", rev, i,
				g.Events[i].ID, len(g.Events[i].Resources), e.ID, len(e.Resources))
		}
	}
}

func wantDone(t *testing.T, term forewarn.Term) {
	t.Helper()
	select {
	case <-term.Done():
	case <-time.After(wait):
		t.Fatalf("term not done within %v", wait)
	}
}

func wantLeader(t *testing.T, s *etcd.Store, leader string) {
	t.Helper()
	st, err := s.Replicas(t.Context())
	if err != nil {
		t.Fatalf("Replicas: %v", err)
	}
	if st.Leader != leader {
		t.Fatalf("leader %q, want %q", st.Leader, leader)
	}
}

func wantReplicas(t *testing.T, s *etcd.Store, want *forewarn.ClusterStatus) {
	t.Helper()
	got, err := s.Replicas(t.Context())
	if err != nil {
		t.Fatalf("Replicas: %v", err)
	}
	if got.Revision != want.Revision || got.Leader != want.Leader || len(got.Replicas) != len(want.Replicas) {
		t.Fatalf("Replicas = %+v, want %+v", *got, *want)
	}
	for i, w := range want.Replicas {
		g := got.Replicas[i]
		if g.Name != w.Name || g.Address != w.Address || g.Revision != w.Revision || g.Leader != w.Leader ||
			!g.Started.Equal(w.Started) || !g.Updated.Equal(w.Updated) || g.Started.Location() != time.UTC {
			t.Errorf("replica %d = %+v, want %+v (times in UTC)", i, g, w)
		}
	}
}
