package admin

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/report"
)

// handleReport answers the client-behaviour report of every VM, or with
// ?vm=NAME of one VM and its events: see package report.
func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, vs := range q {
		switch {
		case k != "vm":
			s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "unknown parameter %s (want vm=NAME)", quote(k)))
			return
		case len(vs) > 1:
			s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "parameter vm is given %d times; give one VM", len(vs)))
			return
		}
	}
	end, err := s.turn(r.Context()) // Start copies every event
	if err != nil {
		s.writeBusy(w, r, err)
		return
	}
	st, err := report.Start(s.eng, s.History, time.Now(), q.Get("vm"))
	end()
	if err != nil {
		s.writeError(w, r, shorten(err, q.Get("vm")))
		return
	}
	// Written VM by VM: however large the fleet, and however slow the
	// reader, the answer holds one VM's report at a time.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = st.WriteTo(w) // a failed write means the client went away
}

// Report returns the client-behaviour report of every VM, or of the VM
// named vm and its events when vm is not empty.
// Errors: ENOTFOUND for a VM not in the fleet.
func (c *Client) Report(ctx context.Context, vm string) (*report.Report, error) {
	p := "/v1/report"
	if vm != "" {
		p += "?vm=" + url.QueryEscape(vm)
	}
	var rep report.Report
	if err := c.do(ctx, http.MethodGet, p, nil, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
