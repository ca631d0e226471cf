package report_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/mem"
	"github.com/forewarn/forewarn/report"
)

// fleetOf returns n Azure VMs in availability sets of 10, with the
// engine, a History in which each VM made 3 requests, and one Reboot
// per 100 VMs.
func fleetOf(b *testing.B, n int) (*engine.Engine, *history.History) {
	b.Helper()
	fleet := &forewarn.Fleet{}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm_%06d", i)
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		fleet.VMs = append(fleet.VMs, &forewarn.VM{Name: names[i], IP: ip, Provider: forewarn.Azure,
			AvailabilitySet: fmt.Sprintf("set_%d", i/10), UpdateDomain: i % 10})
	}
	eng, err := engine.New(b.Context(), engine.Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	h := history.New(names, 0)
	for _, name := range names {
		for range 3 {
			w := h.Start(httptest.NewRecorder(), name)
			h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
		}
	}
	for i := 0; i < n; i += 100 {
		if _, err := eng.Create(b.Context(), engine.Spec{Type: forewarn.Reboot, VMs: []string{names[i]}, Notice: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	return eng, h
}

// BenchmarkReport writes the report of a whole fleet as GET /v1/report
// answers it (Start, then WriteTo), at 1k, 10k and 100k VMs.
func BenchmarkReport(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			eng, h := fleetOf(b, n)
			b.ReportAllocs()
			for b.Loop() {
				s, err := report.Start(eng, h, time.Now(), "")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.WriteTo(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/vm")
		})
	}
}
