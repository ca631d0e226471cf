package admin

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	// Hosts are taken in this order; AllHosts takes every host a VM
	// names, by name, instead.
	Hosts    []string `json:"hosts,omitempty"`
	AllHosts bool     `json:"allHosts,omitempty"`
	MaxHosts int      `json:"maxHosts,omitempty"`
	// MaxUnavailable maps a group kind (availabilitySet, scaleSet,
	// placementGroup, updateDomain, zone) to a count ("1") or a percent
	// ("25%") of the group's VMs.
	MaxUnavailable map[string]string `json:"maxUnavailable,omitempty"`
	// Delay, Notice and ReplyTimeout are Go durations (10m, 90s).
	Delay        string   `json:"delay,omitempty"`
	Notice       string   `json:"notice,omitempty"`
	ReplyTimeout string   `json:"replyTimeout,omitempty"`
	Action       string   `json:"action,omitempty"`
	Windows      []string `json:"windows,omitempty"`
	Description  string   `json:"description,omitempty"`
	Webhooks     []string `json:"webhooks,omitempty"`
}

// SessionView is a session as the operator API gives it: its spec's
// durations as Go durations, its budgets as given.
type SessionView struct {
	ID        string                 `json:"id"`
	State     forewarn.SessionState  `json:"state"`
	Reason    string                 `json:"reason,omitempty"`
	Spec      SessionRequest         `json:"spec"`
	Hosts     []forewarn.SessionHost `json:"hosts"`
	Created   time.Time              `json:"created"`
	Updated   time.Time              `json:"updated"`
	LastEnded time.Time              `json:"lastEnded,omitzero"`
}

// ParseBudget reads a budget: a count ("2") or a percent ("25%").
func ParseBudget(kind, v string) (forewarn.Budget, error) {
	bad := forewarn.Errorf(forewarn.EINVALID, "max unavailable per %s: %s is neither a count of at least 1 nor a percent from 1%% to 100%%", kind, quote(v))
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return forewarn.Budget{}, bad
		}
		return forewarn.Budget{Percent: n}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return forewarn.Budget{}, bad
	}
	return forewarn.Budget{Count: n}, nil
}

// spec checks req and converts it; the engine checks the rest.
func (req *SessionRequest) spec(eng *engine.Engine) (forewarn.SessionSpec, error) {
	spec := forewarn.SessionSpec{Hosts: req.Hosts, MaxHosts: req.MaxHosts, Action: req.Action, Windows: req.Windows,
		Description: req.Description, Webhooks: req.Webhooks}
	switch {
	case req.AllHosts && len(req.Hosts) > 0:
		return spec, forewarn.Errorf(forewarn.EINVALID, "give hosts or allHosts, not both")
	case req.AllHosts:
		for _, h := range eng.Hosts() {
			spec.Hosts = append(spec.Hosts, h.Name)
		}
		if len(spec.Hosts) == 0 {
			return spec, forewarn.Errorf(forewarn.EINVALID, "allHosts: no VM of the fleet names a host")
		}
	}
	for kind, v := range req.MaxUnavailable {
		b, err := ParseBudget(kind, v)
		if err != nil {
			return spec, err
		}
		if spec.MaxUnavailable == nil {
			spec.MaxUnavailable = make(map[string]forewarn.Budget)
		}
		spec.MaxUnavailable[kind] = b
	}
	var err error
	for _, d := range []struct {
		field string
		v     string
		to    *time.Duration
	}{{"delay", req.Delay, &spec.Delay}, {"notice", req.Notice, &spec.Notice}, {"replyTimeout", req.ReplyTimeout, &spec.ReplyTimeout}} {
		if *d.to, err = parseDuration(d.field, d.v); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// viewOf returns the operator API's view of s.
func viewOf(s *forewarn.Session) SessionView {
	v := SessionView{ID: s.ID, State: s.State, Reason: s.Reason, Hosts: s.Hosts, Created: s.Created, Updated: s.Updated, LastEnded: s.LastEnded}
	sp := s.Spec
	v.Spec = SessionRequest{Hosts: sp.Hosts, MaxHosts: max(sp.MaxHosts, 1), Action: sp.Action, Windows: sp.Windows,
		Description: sp.Description, Webhooks: sp.Webhooks}
	if v.Spec.Action == "" {
		v.Spec.Action = string(forewarn.Reboot)
	}
	for kind, b := range sp.MaxUnavailable {
		if v.Spec.MaxUnavailable == nil {
			v.Spec.MaxUnavailable = make(map[string]string)
		}
		if b.Percent > 0 {
			v.Spec.MaxUnavailable[kind] = strconv.Itoa(b.Percent) + "%"
		} else {
			v.Spec.MaxUnavailable[kind] = strconv.Itoa(b.Count)
		}
	}
	for _, d := range []struct {
		d  time.Duration
		to *string
	}{{sp.Delay, &v.Spec.Delay}, {sp.Notice, &v.Spec.Notice}, {sp.ReplyTimeout, &v.Spec.ReplyTimeout}} {
		if d.d > 0 {
			*d.to = d.d.String()
		}
	}
	return v
}

func (s *Server) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var req SessionRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := req.spec(s.eng)
	for _, u := range spec.Webhooks {
		if err == nil {
			err = forewarn.ValidWebhookURL(u) // a bad URL is named before a missing secret
		}
	}
	if err == nil && len(spec.Webhooks) > 0 && !s.Webhooks.Configured() {
		err = forewarn.Errorf(forewarn.EINVALID, "this server signs no webhooks (start it with --webhook-secret-file): a session's webhooks would never be sent")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ses, err := s.eng.CreateSession(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, viewOf(ses))
}

func (s *Server) handleListSessions(w http.ResponseWriter, r *http.Request) {
	all := s.eng.Sessions()
	views := make([]SessionView, len(all))
	for i, ses := range all {
		views[i] = viewOf(ses)
	}
	writeList(s, w, r, "sessions", views)
}

func (s *Server) handleGetSession(w http.ResponseWriter, r *http.Request) {
	ses, err := s.eng.Session(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, viewOf(ses))
}

// sessionAction returns the handler of POST /v1/sessions/{id}/<verb>:
// it applies op to the session, then answers it.
func (s *Server) sessionAction(op func(context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := op(r.Context(), r.PathValue("id")); err != nil {
			s.writeError(w, r, err)
			return
		}
		s.handleGetSession(w, r)
	}
}

// hostFailRequest is the body of POST /v1/hosts/{name}/fail.
type hostFailRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) handleHostDone(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.HostDone(r.Context(), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.handleGetHost(w, r)
}

func (s *Server) handleHostFail(w http.ResponseWriter, r *http.Request) {
	var req hostFailRequest
	if err := decode(w, r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.eng.HostFail(r.Context(), r.PathValue("name"), req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.handleGetHost(w, r)
}

// hostOrder ranks the host states a wait can reach, in order.
var hostOrder = map[forewarn.HostState]int{forewarn.HostPending: 0, forewarn.HostNotifying: 1, forewarn.HostReady: 2,
	forewarn.HostInMaintenance: 3, forewarn.HostDone: 4}

// maxHostWait bounds one GET /v1/hosts/{name}/wait; a client waits
// longer by asking again.
const maxHostWait = 5 * time.Minute

// handleHostWait holds GET /v1/hosts/{name}/wait?state=S&timeout=D until
// the host's state in its newest session reaches S (or a later one; a
// host InMaintenance has been Ready), and answers the host. A host that
// Failed, or whose session was cancelled while it was Pending, gets 409
// with the reason; the timeout (at most 5m, 30s by default) gets 504.
func (s *Server) handleHostWait(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q := r.URL.Query()
	want := forewarn.HostState(q.Get("state"))
	rank, ok := hostOrder[want]
	if !ok && want != forewarn.HostFailed {
		s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "state %s: want Notifying, Ready, InMaintenance, Done or Failed", quote(string(want))))
		return
	}
	timeout := 30 * time.Second
	if v := q.Get("timeout"); v != "" {
		d, err := parseDuration("timeout", v)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if d <= 0 || d > maxHostWait {
			s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "timeout %s: want more than 0s and at most %s (wait longer by asking again)", v, maxHostWait))
			return
		}
		timeout = d
	}
	if _, err := s.hostInfo(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		adv := s.eng.Advanced()
		st := s.eng.HostStatus(name)
		reached := st.Session != "" && (st.State == want ||
			want != forewarn.HostFailed && st.State != forewarn.HostFailed && hostOrder[st.State] >= rank)
		switch {
		case reached:
			s.handleGetHost(w, r)
			return
		case st.State == forewarn.HostFailed:
			s.writeError(w, r, forewarn.Errorf(forewarn.ECONFLICT, "host %s failed in session %s: %s", name, st.Session, st.Reason))
			return
		case st.State == forewarn.HostPending && st.SessionState.Ended():
			s.writeError(w, r, forewarn.Errorf(forewarn.ECONFLICT, "host %s will not be %s: session %s ended before it started", name, want, st.Session))
			return
		}
		select {
		case <-adv:
		case <-t.C:
			s.writeError(w, r, &statusError{status: http.StatusGatewayTimeout, err: forewarn.Errorf(forewarn.EUNAVAILABLE,
				"host %s is %s, not %s, after %s", name, cmp.Or(string(st.State), "in no session"), want, timeout)})
			return
		case <-r.Context().Done():
			return
		}
	}
}
