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

// handleListHosts answers every host a VM names, by name, with its VMs
// and where it is in its newest session.
func (s *Server) handleListHosts(w http.ResponseWriter, r *http.Request) {
	hosts := s.eng.Hosts()
	st := s.eng.HostStatuses()
	for i := range hosts {
		hosts[i] = withStatus(hosts[i], st[hosts[i].Name])
	}
	writeList(s, w, r, "hosts", hosts) // as hostsResponse
}

// handleGetHost answers one host as hostInfo gives it.
func (s *Server) handleGetHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.hostInfo(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, h)
}

// hostInfo returns the host name with its VMs and where it is in its
// newest session. A host is known while a VM names it or a session
// does: one whose VMs all left the fleet during its maintenance is
// still its session's, and answers with no VMs. Errors: ENOTFOUND.
func (s *Server) hostInfo(name string) (engine.HostInfo, error) {
	vms, ok := s.eng.HostVMs(name)
	st := s.eng.HostStatus(name)
	if !ok && st.Session == "" {
		return engine.HostInfo{}, forewarn.Errorf(forewarn.ENOTFOUND, "no host named %s", quote(name))
	}
	if vms == nil {
		vms = []string{} // "vms":[], as for any host
	}
	return withStatus(engine.HostInfo{Name: name, VMs: vms}, st), nil
}

// withStatus returns h with st, where it is in its newest session: the
// operator API's one join of a host and its session.
func withStatus(h engine.HostInfo, st engine.HostStatus) engine.HostInfo {
	h.Session, h.State, h.Reason = st.Session, st.State, st.Reason
	return h
}
