package admin

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/forewarn/forewarn"
)

// What keeps a web page from driving the operator API through the
// browser of someone who can reach it (the API's default is loopback
// without a token, and every browser on the host can reach loopback):
//
//   - DNS rebinding: a page of rebind.evil.example has its name resolve
//     to 127.0.0.1, and its requests, same-origin for the browser, reach
//     the API with Host: rebind.evil.example. The API answers only the
//     names it is known by: its own address, loopback names, and the
//     names the operator allows (AllowedHosts). An IP address in Host
//     is not enough for the attack: a page can only be served from the
//     name it runs under.
//   - Cross-site requests: a page of evil.example posts a form, or a
//     fetch, to http://127.0.0.1:8170. The browser marks it with
//     Sec-Fetch-Site and Origin, and writes so marked are refused.
//   - Bodies that a form can send: a write's body must be JSON, with
//     Content-Type: application/json, which no form can send and which a
//     cross-site fetch cannot send without the API's consent (CORS
//     preflight, which it never gives).
//
// The checks hold with a token too: a page cannot send the token, but
// the dashboard's shell and /healthz need none, and a name the operator
// did not choose has no business reaching the API.

// guard refuses a request whose Host is not one of the server's names,
// a cross-origin write, or a write whose body is not JSON.
func (s *Server) guard(r *http.Request) error {
	if !s.hostAllowed(r) {
		return &statusError{
			status: http.StatusMisdirectedRequest,
			err: forewarn.Errorf(forewarn.EFORBIDDEN,
				"this server does not answer for host %s: the operator API answers only to its own address and to localhost, 127.0.0.1 and [::1], so that a web page cannot reach it by DNS rebinding; to reach it by another name, start the server with --admin-allowed-hosts NAME",
				quote(r.Host)),
		}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	if err := s.crossOrigin(r); err != nil {
		return err
	}
	return jsonBody(r)
}

// hostAllowed reports whether r's Host (with or without a port) is a
// loopback name (localhost, or an address of 127.0.0.0/8 or ::1), the
// address the request came to, or one of AllowedHosts. A request without
// a Host (HTTP/1.0) is allowed: no browser sends one.
func (s *Server) hostAllowed(r *http.Request) bool {
	if r.Host == "" {
		return true
	}
	name := hostName(r.Host)
	if name == "localhost" {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil && ip.Unmap().IsLoopback() {
		return true
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && sameHost(hostName(la.String()), name) {
		return true
	}
	for _, h := range s.AllowedHosts {
		if sameHost(hostName(h), name) {
			return true
		}
	}
	return false
}

// sameHost reports whether the host names a and b, as hostName returns
// them, are the same name or the same IP address.
func sameHost(a, b string) bool {
	if a == b {
		return true
	}
	ia, erra := netip.ParseAddr(a)
	ib, errb := netip.ParseAddr(b)
	return erra == nil && errb == nil && ia.Unmap() == ib.Unmap()
}

// hostName returns the host of a Host header or an address, without its
// port, the brackets of an IPv6 address, a trailing dot, or an IPv6
// zone, in lower case.
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h, _, _ = strings.Cut(h, "%")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// ValidAllowedHost checks an entry of AllowedHosts: a host name or an IP
// address, without a scheme, a port or a path.
func ValidAllowedHost(h string) error {
	switch {
	case h == "":
		return forewarn.Errorf(forewarn.EINVALID, "an allowed host is empty")
	case strings.ContainsAny(h, "/?#@* \t"):
		return forewarn.Errorf(forewarn.EINVALID, "allowed host %s is not a host name or an IP address (no scheme, path or wildcard)", quote(h))
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return nil
	}
	if strings.Contains(h, ":") {
		return forewarn.Errorf(forewarn.EINVALID, "allowed host %s has a port: give the name alone, which is allowed with any port", quote(h))
	}
	return nil
}

// crossOrigin refuses a write that a browser marks as coming from
// another site's page: Sec-Fetch-Site other than same-origin or none,
// or, from browsers that do not send it, an Origin that is not the
// Host the request came to, or the opaque "null".
func (s *Server) crossOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if s.cop.Check(r) == nil && origin != "null" {
		return nil
	}
	why := "its Origin " + quote(origin) + " is not this server's (Host " + quote(r.Host) + ")"
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		why = "its browser marks it Sec-Fetch-Site: " + clip(site)
	}
	return forewarn.Errorf(forewarn.EFORBIDDEN,
		"cross-origin request refused: %s; the operator API takes writes only from its own dashboard and from clients that are not browsers", why)
}

// bodyTypes returns the media types a write to r's route may carry:
// JSON, and besides a merge patch for PATCH, YAML for a fleet document.
// None of them is a type a web page's form or simple request can send.
func bodyTypes(r *http.Request) map[string]bool {
	switch {
	case r.Method == http.MethodPatch:
		return patchTypes
	case r.URL.Path == "/v1/fleet/apply":
		return fleetTypes
	}
	return jsonTypes
}

var (
	jsonTypes  = map[string]bool{"application/json": true}
	patchTypes = map[string]bool{"application/json": true, "application/merge-patch+json": true}
	fleetTypes = map[string]bool{"application/json": true, "application/yaml": true, "application/x-yaml": true, "text/yaml": true}
)

// jsonBody refuses a write with a Content-Type other than
// application/json (parameters allowed, a charset only if UTF-8), and a
// write with a body but no Content-Type; a PATCH may send
// application/merge-patch+json, and a fleet apply YAML. A write without
// a body and without a Content-Type (an approval, say) is accepted.
func jsonBody(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return nil
		}
		return &statusError{status: http.StatusUnsupportedMediaType,
			err: forewarn.Errorf(forewarn.EINVALID, "a request body needs Content-Type: application/json")}
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && bodyTypes(r)[mt] {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &statusError{status: http.StatusUnsupportedMediaType,
		err: forewarn.Errorf(forewarn.EINVALID, "Content-Type %s is not accepted: send the body as JSON with Content-Type: application/json", quote(ct))}
}
