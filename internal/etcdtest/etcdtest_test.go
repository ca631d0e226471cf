package etcdtest

import (
	"context"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/internal/etcdproc"
)

func TestStart(t *testing.T) {
	s := Start(t)
	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %q, want one loopback URL", eps)
	}
	if !etcdproc.Healthy(t.Context(), eps[0]) {
		t.Fatal("a started server is not healthy")
	}
	s.Stop()
	if etcdproc.Healthy(t.Context(), eps[0]) {
		t.Fatal("a stopped server answers")
	}
	s.Restart()
	if !etcdproc.Healthy(t.Context(), eps[0]) {
		t.Fatal("a restarted server is not healthy")
	}
}

// TestCluster stops, kills and restarts members of a three-member
// cluster: the others keep a quorum and stay healthy, and a restarted
// member rejoins on its data directory.
func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	eps := c.Endpoints()
	if len(eps) != 3 {
		t.Fatalf("Endpoints() = %q, want 3", eps)
	}
	want := func(up ...bool) {
		t.Helper()
		for i, ep := range eps {
			if got := etcdproc.Healthy(context.Background(), ep); got != up[i] {
				t.Errorf("member %d healthy = %v, want %v", i, got, up[i])
			}
		}
	}
	want(true, true, true)
	c.Kill(0)
	c.Stop(1)
	want(false, false, false) // the last one has no quorum: not healthy
	c.Restart(1)
	want(false, true, true)
	c.Restart(0)
	want(true, true, true)
}
