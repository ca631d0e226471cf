package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
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

// TestStreamIsBuild: the stream writes, byte for byte, what
// json.Encoder writes of Build's report at the same now, for the whole
// fleet and for each VM: VMs of the three APIs with requests, findings
// and names json escapes, events pending, started, completed, approved
// (by the operator, by a VM they do not name), seen first by a VM they
// do not name, and never seen.
func TestStreamIsBuild(t *testing.T) {
	fleet := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "web_0", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.2"), AvailabilitySet: "web", UpdateDomain: 0},
		{Name: "web_1", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.3"), AvailabilitySet: "web", UpdateDomain: 1},
		{Name: "<b>&amp;", Provider: forewarn.Azure, IP: netip.MustParseAddr("127.0.0.4")},
		{Name: "gce_0", Provider: forewarn.GCE, IP: netip.MustParseAddr("127.0.0.5")},
		{Name: "aws_0", Provider: forewarn.AWS, IP: netip.MustParseAddr("127.0.0.6")},
	}}
	eng, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: fleet, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	names := []string{"web_0", "web_1", "<b>&amp;", "gce_0", "aws_0"}
	h := history.New(names, 8)
	call := func(vm string, api history.API, path, version string) {
		w := h.Start(httptest.NewRecorder(), vm)
		if version == "" {
			history.NoteNoHeader(w)
		}
		h.Done(w, api, "GET", path, version)
		eng.NoteRequest(vm)
	}
	call("web_0", history.Azure, "/metadata/scheduledevents", "2017-03-01")
	call("web_0", history.Azure, "/metadata/scheduledevents", "")
	call("<b>&amp;", history.Azure, "/metadata/scheduledevents", "2020-07-01")
	call("gce_0", history.GCE, "/computeMetadata/v1/instance/maintenance-event", "")
	call("aws_0", history.AWS, "/latest/meta-data/events/maintenance/scheduled", "")
	ctx := t.Context()
	mk := func(typ forewarn.EventType, vms ...string) *forewarn.Event {
		ev, err := eng.Create(ctx, engine.Spec{Type: typ, VMs: vms, Notice: time.Hour, Description: "<maintenance> & more"})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	freeze := mk(forewarn.Freeze, "web_0")
	// web_1, of web_0's availability set, reads web_0's Freeze first,
	// and approves web_0's Reboot, which it never read: the report of
	// web_1 lists each for one of the filter's rules.
	w := h.Start(httptest.NewRecorder(), "web_1")
	h.See(w, &history.Ref{ID: freeze.ID})
	h.Done(w, history.Azure, "GET", "/metadata/scheduledevents", "2020-07-01")
	reboot := mk(forewarn.Reboot, "web_0")
	if err := eng.Approve(ctx, "web_1", []string{reboot.ID}); err != nil {
		t.Fatal(err)
	}
	approved := mk(forewarn.Reboot, "<b>&amp;")
	if err := eng.Approve(ctx, forewarn.Operator, []string{approved.ID}); err != nil {
		t.Fatal(err)
	}
	done := mk(forewarn.Redeploy, "web_1")
	if err := eng.Start(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	if err := eng.Complete(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	mk(forewarn.TerminateOnHostMaintenance, "gce_0")

	now := time.Now().Add(2 * time.Hour)
	for _, vm := range append([]string{""}, names...) {
		rep, err := report.Build(eng, h, now, vm)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		json.NewEncoder(&want).Encode(rep)
		s, err := report.Start(eng, h, now, vm)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		n, err := s.WriteTo(&got)
		if err != nil || n != int64(got.Len()) {
			t.Fatalf("WriteTo: %d, %v (wrote %d)", n, err, got.Len())
		}
		if got.String() != want.String() {
			t.Errorf("vm %q:\ngot  %s\nwant %s", vm, got.String(), want.String())
		}
		if vm == "" && (len(rep.VMs) != 5 || len(rep.Events) != 5 || len(rep.VMs[0].Findings) == 0 || !bytes.Contains(want.Bytes(), []byte(`\u003cb\u003e`))) {
			t.Errorf("the report exercises too little: %s", want.String())
		}
		// web_1's report lists web_0's Freeze (seen first) and Reboot
		// (approved), which name web_0 only, and its own Redeploy.
		if vm == "web_1" && (len(rep.Events) != 3 || rep.Events[0].SeenBy != "web_1") {
			t.Errorf("web_1's report: %s", want.String())
		}
	}
	if _, err := report.Start(eng, h, now, "nobody"); forewarn.ErrorCode(err) != forewarn.ENOTFOUND {
		t.Errorf("Start of an unknown VM: %v, want not_found", err)
	}

	// A writer that fails stops the stream with its error.
	s, _ := report.Start(eng, h, now, "")
	broken := errors.New("gone")
	if _, err := s.WriteTo(failingWriter{broken}); !errors.Is(err, broken) {
		t.Errorf("WriteTo a failing writer: %v", err)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }
