package admin

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/ui"
)

// errUnauthorized refuses a request without the right token.
var errUnauthorized = forewarn.Errorf(forewarn.EUNAUTHORIZED, "missing or wrong bearer token (the CLI reads it from --token-file or $FOREWARN_TOKEN)")

// authenticate checks r's caller and returns who it is: its address,
// prefixed with "token@" when it gave the bearer token. When the server
// has a token, every route but /healthz and the dashboard's page shell
// and static files needs it (EUNAUTHORIZED). When
// it has none, a caller from the address of a VM of the inventory in
// force is refused
// (EFORBIDDEN): VMs can reach a loopback operator API in local setups,
// and a VM is never an operator.
func (s *Server) authenticate(r *http.Request) (who string, err error) {
	who = caller(r)
	if r.URL.Path == "/healthz" || (r.Method == http.MethodGet || r.Method == http.MethodHead) && ui.Public(r.URL.Path) {
		// The dashboard's page shell and static files hold no fleet
		// data; its fragments and stream need the token.
		return who, nil
	}
	if s.Token != "" {
		const prefix = "Bearer "
		h := r.Header.Get("Authorization")
		if len(h) <= len(prefix) || h[:len(prefix)] != prefix ||
			subtle.ConstantTimeCompare([]byte(h[len(prefix):]), []byte(s.Token)) != 1 {
			return who, errUnauthorized
		}
		return "token@" + who, nil
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		if vm := s.vmAt(ap.Addr()); vm != nil {
			return who, forewarn.Errorf(forewarn.EFORBIDDEN,
				"requests from %s are refused: it is the address of VM %q, and VMs may not use the operator API; call it from another address, or give the server --admin-token-file and send the token", who, vm.Name)
		}
	}
	return who, nil
}

// caller returns the address r came from, without its port.
func caller(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// vmAt returns the VM of the inventory in force whose address is a, or
// nil. VMs without one, which answer every caller, are left out: they
// would make every caller a VM.
func (s *Server) vmAt(a netip.Addr) *forewarn.VM {
	if vm := s.eng.Lookup(a.Unmap(), ""); vm != nil && vm.IP.IsValid() {
		return vm
	}
	return nil
}
