package admin

import (
	"net/http"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// hostsResponse is the body of GET /v1/hosts.
type hostsResponse struct {
	Hosts []engine.HostInfo `json:"hosts"`
}

// handleListHosts answers every host a VM names, by name, with its VMs.
func (s *Server) handleListHosts(w http.ResponseWriter, r *http.Request) {
	hosts := s.eng.Hosts()
	st := s.eng.HostStatuses()
	for i := range hosts {
		h := &hosts[i]
		x := st[h.Name]
		h.Session, h.State, h.Reason = x.Session, x.State, x.Reason
	}
	writeList(s, w, r, "hosts", hosts) // as hostsResponse
}

// handleGetHost answers one host with its VMs.
func (s *Server) handleGetHost(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	vms, ok := s.eng.HostVMs(name)
	if !ok {
		s.writeError(w, r, forewarn.Errorf(forewarn.ENOTFOUND, "no host named %s", quote(name)))
		return
	}
	x := s.eng.HostStatus(name)
	s.writeJSON(w, r, http.StatusOK, engine.HostInfo{Name: name, VMs: vms, Session: x.Session, State: x.State, Reason: x.Reason})
}
