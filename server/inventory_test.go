package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/server"
)

// dialFrom opens a connection to addr from ip, and reports whether the
// server admitted it: a refused one is sent 503 and closed at once, an
// admitted one waits for a request.
func dialFrom(t *testing.T, ip, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [12]byte
	n, err := c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return c, true
	}
	if !strings.HasPrefix(string(b[:n]), "HTTP/1.1 503") {
		t.Fatalf("a connection from %s got %q (%v), want 503 or nothing", ip, b[:n], err)
	}
	return c, false
}

// TestServerFollowsTheInventory: a running server's fleet, request
// history, report and metadata listener's caps follow VMs added and
// removed through its engine.
func TestServerFollowsTheInventory(t *testing.T) {
	s, err := server.New(t.Context(), memConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close() // else Shutdown waits 5 s for them to send a request
		}
		cancel()
		<-done
	}()
	md := s.MetadataAddr().String()

	// 127.0.0.9 is no VM's: 4 connections, the stranger's cap.
	for i := range 5 {
		c, ok := dialFrom(t, "127.0.0.9", md)
		if ok != (i < 4) {
			t.Fatalf("stranger's connection %d admitted %v, want %v", i+1, ok, i < 4)
		}
		conns = append(conns, c)
	}
	change := func(c engine.InventoryChange) {
		t.Helper()
		if _, err := s.Engine().ChangeInventory(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	change(engine.InventoryChange{Set: []*forewarn.VM{{Name: "late", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.9")}}})
	c, ok := dialFrom(t, "127.0.0.9", md)
	conns = append(conns, c)
	if !ok {
		t.Fatal("the address of VM late, added at run time, is still held to a stranger's 4 connections")
	}
	if s.Fleet().VM("late") == nil {
		t.Error("Fleet does not have VM late")
	}
	if code, body := get(t, from(t, "127.0.0.9"), "http://"+md+"/metadata/scheduledevents?api-version=2020-07-01", "Metadata", "true"); code != 200 {
		t.Fatalf("VM late, added at run time: %d %s", code, body)
	}
	if st, ok := s.History().Stats("late"); !ok || st.Requests != 1 {
		t.Errorf("the request history counts %d requests of VM late (ok %v), want 1", st.Requests, ok)
	}
	change(engine.InventoryChange{Remove: []string{"web_0"}})
	if _, ok := s.History().Stats("web_0"); ok || s.Fleet().VM("web_0") != nil {
		t.Error("VM web_0, removed, is still in the fleet or the request history")
	}
	code, body := get(t, from(t, "127.0.0.1"), "http://"+s.AdminAddr().String()+"/v1/report")
	var rep struct{ VMs []struct{ Name string } }
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
		t.Fatalf("report: %d %v %.300s", code, err, body)
	}
	var names []string
	for _, v := range rep.VMs {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"gce_0", "late"}) {
		t.Errorf("the report lists %v, want [gce_0 late]", names)
	}
}
