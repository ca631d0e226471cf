package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/caller"
	"github.com/forewarn/forewarn/internal/echo"
)

// The neutron listener: where OpenStack's neutron metadata agents
// forward their instances' requests, as they would to Nova's metadata
// API with [neutron] service_metadata_proxy = true. Each request names
// its instance in X-Instance-ID, signed with the shared secret
// (neutron's metadata_proxy_shared_secret) in X-Instance-ID-Signature,
// and its project in X-Tenant-ID. The checks, and the status of each
// refusal, are those of Nova's handler (nova/api/metadata/handler.py,
// _handle_instance_id_request); docs/neutron.md says how the instance
// and project map to a VM of the fleet.

// The headers of neutron's metadata proxy, canonical. Messages spell
// them as neutron does (X-Instance-ID).
const (
	neutronInstanceHeader  = "X-Instance-Id"
	neutronSignatureHeader = "X-Instance-Id-Signature"
	neutronTenantHeader    = "X-Tenant-Id"
)

// neutronRelay is the relay name of a request the neutron listener
// vouched for (caller.ID.Relay).
const neutronRelay = "neutron"

// Caps of the neutron listener's connections. A metadata agent opens a
// connection for each request it forwards, so one agent holds as many
// as its instances have requests at once.
const (
	neutronConnsPerSource = 256
	neutronConnsTotal     = 1024
	// With --neutron-proxies, other addresses hold at most
	// strangerConnsPerSource each and this many together.
	neutronStrangerConns = 16
)

// minNeutronSecretBytes is the shortest shared secret the server takes
// without a warning: a shorter one may be guessed from one signed
// request.
const minNeutronSecretBytes = 16

// loadNeutronSecret reads the shared secret from path: the file's
// content without the white space around it, as neutron's and Nova's
// configuration files give the secret. A file that others than its
// owner can read or change, or an empty one, is refused; a short secret
// is taken with a warning, since it must be neutron's.
func loadNeutronSecret(path string, log *slog.Logger) ([]byte, error) {
	secret, err := loadSecret("--neutron-secret-file", path, "neutron's metadata_proxy_shared_secret")
	if err != nil {
		return nil, err
	}
	if len(secret) < minNeutronSecretBytes {
		log.Warn(fmt.Sprintf("the neutron shared secret is %d bytes, shorter than %d: one signed request is enough to guess it; set a longer random metadata_proxy_shared_secret in neutron and in --neutron-secret-file", len(secret), minNeutronSecretBytes),
			"file", path)
	}
	return secret, nil
}

// vmNamer finds a VM of the inventory in force by its name.
type vmNamer interface {
	VMNamed(name string) *forewarn.VM
}

// neutronHandler serves the neutron listener: it checks each request's
// source, headers and signature as Nova does, finds the VM its
// instance ID names, holds each VM to its own cap on requests at once,
// and hands the request, with the VM's identity, to the metadata API.
type neutronHandler struct {
	vmGate
	secret []byte
	// proxies are the addresses neutron's agents connect from; empty
	// for any.
	proxies []netip.Prefix
	vms     vmNamer
}

func newNeutronHandler(secret []byte, proxies []netip.Prefix, vms vmNamer, md http.Handler, perVM int) *neutronHandler {
	h := &neutronHandler{secret: secret, proxies: proxies, vms: vms}
	h.vmGate.init(md, perVM)
	return h
}

// signInstance returns the signature neutron gives instance ID id: the
// HMAC-SHA256 of id under secret, in lower-case hex.
func signInstance(secret []byte, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// proxy reports whether r comes from an address of h.proxies, or h has
// none.
func (h *neutronHandler) proxy(r *http.Request) bool {
	if len(h.proxies) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	return slices.ContainsFunc(h.proxies, func(p netip.Prefix) bool { return p.Contains(a) })
}

func (h *neutronHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.proxy(r) {
		w.Header().Set("Connection", "close")
		relayError(w, http.StatusForbidden, "the neutron listener answers the neutron metadata proxies of --neutron-proxies only; "+caller.WhereOf(r)+" is none of them")
		return
	}
	ids, sigs, tenants := r.Header.Values(neutronInstanceHeader), r.Header.Values(neutronSignatureHeader), r.Header.Values(neutronTenantHeader)
	// Nova's checks, in Nova's order.
	var bad string
	switch {
	case len(ids) == 0:
		bad = "the X-Instance-ID header is missing"
	case len(sigs) == 0:
		bad = "the X-Instance-ID-Signature header is missing"
	case len(tenants) == 0:
		bad = "the X-Tenant-ID header is missing"
	case len(ids) > 1:
		bad = "the request carries more than one X-Instance-ID header"
	case len(tenants) > 1:
		bad = "the request carries more than one X-Tenant-ID header"
	}
	if bad != "" {
		relayError(w, http.StatusBadRequest, bad)
		return
	}
	id, tenant := ids[0], tenants[0]
	// Two signatures are refused as Nova refuses them: its server joins
	// them into one value, which matches none.
	if len(sigs) != 1 || !hmac.Equal([]byte(signInstance(h.secret, id)), []byte(sigs[0])) {
		relayError(w, http.StatusForbidden, "X-Instance-ID-Signature is not the signature of X-Instance-ID under the shared secret")
		return
	}
	// An unknown instance and a known one of another project get the
	// same answer, as from Nova.
	vm := h.vms.VMNamed(id)
	if vm == nil || (vm.Network != "" && vm.Network != tenant) {
		relayError(w, http.StatusNotFound, fmt.Sprintf("no VM of the fleet is instance %q of tenant %q", echo.Clip(id), echo.Clip(tenant)))
		return
	}
	// The metadata API finds a VM by its network and address: a VM of
	// no address would be found only for its own provider's paths, and
	// another VM of no address for the other paths.
	if !vm.IP.IsValid() {
		relayError(w, http.StatusNotFound, fmt.Sprintf("VM %q has no address (ip: any): it answers every caller of its API on its network, not one instance; give it an address of its own to serve it through neutron", vm.Name))
		return
	}
	r.Header.Del("X-Forwarded-For") // the metadata APIs refuse a request that carries it
	h.serve(w, r, vmKey{network: vm.Network, addr: vm.IP.Unmap()}, 0, neutronRelay,
		fmt.Sprintf("too many requests at once for instance %q", vm.Name))
}
