package caller

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestOf(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.18.10.2:4000"
	r.Header.Set(NetworkHeader, "blue") // a header is never an identity
	id, ok := Of(r)
	if !ok || id != (ID{Addr: netip.MustParseAddrPort("198.18.10.2:4000")}) || Relayed(r) != nil {
		t.Fatalf("direct: %+v %v", id, ok)
	}
	if id.Where() != "198.18.10.2" || WhereOf(r) != "198.18.10.2" {
		t.Fatalf("Where: %q", id.Where())
	}
	rid := ID{Network: "blue", Addr: netip.MustParseAddrPort("198.18.10.3:5000"), Relay: "host-a"}
	rr := With(r, rid)
	if id, ok := Of(rr); !ok || id != rid || Relayed(rr) == nil || *Relayed(rr) != rid {
		t.Fatalf("relayed: %+v %v", id, ok)
	}
	if w := WhereOf(rr); w != "198.18.10.3 on network blue" {
		t.Fatalf("WhereOf relayed: %q", w)
	}
	r.RemoteAddr = "pipe"
	if _, ok := Of(r); ok || WhereOf(r) != "(unknown)" {
		t.Fatal("an address that is no IP address and port gave an ID")
	}
}

func TestIdentityHeaders(t *testing.T) {
	for _, k := range []string{"Forewarn-Relay-Network", "Forewarn-Relay-Source", "X-Instance-ID", "X-Instance-ID-Signature", "X-Tenant-ID"} {
		h := http.Header{}
		h.Set(k, "x")
		h.Set("Metadata", "true")
		if !HasIdentity(h) {
			t.Errorf("%s is not an identity header", k)
		}
		h.Set(HopLimitHeader, "1")
		h.Set(CloseHeader, "1")
		h.Set(RetryHeader, "1")
		Strip(h)
		if HasIdentity(h) || len(h) != 1 || h.Get("Metadata") != "true" {
			t.Errorf("%s: after Strip %v", k, h)
		}
	}
	if HasIdentity(http.Header{"X-Forwarded-For": {"198.18.0.1"}}) {
		t.Error("X-Forwarded-For is an identity header")
	}
}
