// Package caller says where a metadata request comes from: the network
// and source address of the VM that sent it. A request that reaches the
// server directly comes from its connection's address on network "";
// one that a relay forwards comes from the network and address the relay
// vouched for, which the server's relay listener checked and recorded
// in the request's context (With). Nothing a VM writes in its request
// ever changes it.
package caller

import (
	"context"
	"net/http"
	"net/netip"
)

// The headers of the relay protocol. A relay sets Network and Source on
// each request it forwards, over a connection on which it authenticated
// itself; a server trusts them only there. HopLimit is the server's
// answer to an EC2 token request that came through a relay: the IP TTL
// the relay sets on the packets of its answer to the VM.
const (
	NetworkHeader  = "Forewarn-Relay-Network"
	SourceHeader   = "Forewarn-Relay-Source"
	HopLimitHeader = "Forewarn-Hop-Limit"
	// CloseHeader stands, on an answer to a relay, for the
	// "Connection: close" the server would send the VM directly: the
	// relay closes the VM's connection after the answer. (On the
	// relay's own connection, an HTTP/2 one, it would end every request
	// the relay carries.)
	CloseHeader = "Forewarn-Close"
	// RetryHeader, on an answer to a relay, says that the server is
	// going away and did not serve the request: the relay sends it to
	// another server (a held long-poll when a replica shuts down).
	RetryHeader = "Forewarn-Retry"
)

// ID is where a request comes from.
type ID struct {
	// Network is the network the request came from; "" for a request
	// that reached the server directly.
	Network string
	// Addr is the source address and port of the VM's connection.
	Addr netip.AddrPort
	// Relay names the relay that vouched for it; "" for none.
	Relay string
}

// key is the context key of a relayed request's ID.
type key struct{}

// With returns r with id recorded as where it comes from.
func With(r *http.Request, id ID) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), key{}, &id))
}

// Of returns where r comes from: the ID With recorded, or r's
// RemoteAddr on network "". ok is false when RemoteAddr is not an IP
// address and port (an in-memory listener's, say).
func Of(r *http.Request) (id ID, ok bool) {
	if p, _ := r.Context().Value(key{}).(*ID); p != nil {
		return *p, true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return ID{}, false
	}
	return ID{Addr: ap}, true
}

// Relayed returns the ID of r when a relay forwarded it, or nil.
func Relayed(r *http.Request) *ID {
	p, _ := r.Context().Value(key{}).(*ID)
	return p
}

// HasIdentity reports whether h carries a header that claims an
// identity: the relay protocol's, or those of OpenStack's metadata
// proxy. Only the listeners that authenticate their callers read them;
// anywhere else a request that carries one is refused.
func HasIdentity(h http.Header) bool {
	for _, k := range identityHeaders {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// Strip deletes from h every header that claims an identity (see
// HasIdentity), and every other header of the relay protocol.
func Strip(h http.Header) {
	for _, k := range identityHeaders {
		delete(h, k)
	}
	delete(h, HopLimitHeader)
	delete(h, CloseHeader)
	delete(h, RetryHeader)
}

// identityHeaders are the canonical names of the headers HasIdentity
// looks for.
var identityHeaders = [...]string{
	NetworkHeader, SourceHeader,
	"X-Instance-Id", "X-Instance-Id-Signature", "X-Tenant-Id",
}

// Where returns the address of id for a message: the address alone, or
// "ADDR on network NETWORK".
func (id ID) Where() string {
	if id.Network == "" {
		return id.Addr.Addr().String()
	}
	return id.Addr.Addr().String() + " on network " + id.Network
}

// WhereOf returns Where of r's ID, or "(unknown)" when it has none.
func WhereOf(r *http.Request) string {
	id, ok := Of(r)
	if !ok {
		return "(unknown)"
	}
	return id.Where()
}
