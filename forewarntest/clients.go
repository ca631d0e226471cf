package forewarntest

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/azure"
	"github.com/forewarn/forewarn/gce"
)

// HTTPClient returns an HTTP client whose requests come from the address
// of the VM named vm, as the VM's own would: the metadata APIs answer it
// as that VM. A VM without an address answers every caller; its client
// comes from an address no VM of the fleet has. The client has no
// overall timeout (a Compute Engine long-poll may hang for minutes); its
// idle connections are closed with the Server.
func (s *Server) HTTPClient(vm string) *http.Client {
	s.t.Helper()
	v := s.Fleet().VM(vm)
	if v == nil {
		s.t.Fatalf("forewarntest: no VM %q in the fleet (%s)", vm, vmNames(s.Fleet()))
		return nil
	}
	from := s.operator
	if v.IP.IsValid() {
		from = v.IP.Unmap()
	}
	return s.HTTPClientFrom(from)
}

// HTTPClientFrom returns an HTTP client whose requests come from the
// address from, a VM's or not: a caller of no VM is refused by the
// metadata APIs. Over sockets, from must be an address of this host,
// such as any of 127.0.0.0/8 on Linux.
func (s *Server) HTTPClientFrom(from netip.Addr) *http.Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second}
	if s.Pipes() {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			switch addr {
			case pipeMetadataHost:
				return s.md.dial(ctx, from)
			case pipeOperatorHost:
				return s.op.dial(ctx, from)
			}
			return nil, &net.OpError{Op: "dial", Net: "pipe", Err: forewarn.Errorf(forewarn.ENOTFOUND,
				"forewarntest: %s is not this server (its in-memory transport reaches %s and %s only)", addr, pipeMetadataHost, pipeOperatorHost)}
		}
	} else {
		d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), Timeout: 5 * time.Second}
		tr.DialContext = d.DialContext
	}
	s.mu.Lock()
	s.transports = append(s.transports, tr)
	s.mu.Unlock()
	return &http.Client{Transport: tr}
}

// vmOf returns the VM named name, failing the test unless it exists and
// speaks provider p.
func (s *Server) vmOf(name string, p forewarn.Provider) *forewarn.VM {
	s.t.Helper()
	vm := s.Fleet().VM(name)
	switch {
	case vm == nil:
		s.t.Fatalf("forewarntest: no VM %q in the fleet (%s)", name, vmNames(s.Fleet()))
	case vm.Provider != p:
		s.t.Fatalf("forewarntest: VM %q speaks the %s API, not the %s API", name, vm.Provider, p)
	default:
		return vm
	}
	return nil
}

// AzureClient returns an Azure Scheduled Events client of the VM named
// vm, an Azure VM, with its HTTPClient. opts come after that choice and
// may change it.
func (s *Server) AzureClient(vm string, opts ...azure.ClientOption) *azure.Client {
	s.t.Helper()
	if s.vmOf(vm, forewarn.Azure) == nil {
		return nil
	}
	return azure.NewClient(s.mdURL, append([]azure.ClientOption{azure.WithHTTPClient(s.HTTPClient(vm))}, opts...)...)
}

// GCEClient returns a Compute Engine metadata client of the VM named vm,
// a GCE VM, with its HTTPClient.
func (s *Server) GCEClient(vm string, opts ...gce.ClientOption) *gce.Client {
	s.t.Helper()
	if s.vmOf(vm, forewarn.GCE) == nil {
		return nil
	}
	return gce.NewClient(s.mdURL, append([]gce.ClientOption{gce.WithHTTPClient(s.HTTPClient(vm))}, opts...)...)
}

// AWSClient returns an EC2 instance metadata client of the VM named vm,
// an EC2 VM, with its HTTPClient.
func (s *Server) AWSClient(vm string, opts ...aws.ClientOption) *aws.Client {
	s.t.Helper()
	if s.vmOf(vm, forewarn.AWS) == nil {
		return nil
	}
	return aws.NewClient(s.mdURL, append([]aws.ClientOption{aws.WithHTTPClient(s.HTTPClient(vm))}, opts...)...)
}

// AdminClient returns a client of the operator API, as the CLI uses it,
// calling from an address no VM of the fleet has.
func (s *Server) AdminClient() *admin.Client {
	return admin.NewClient(s.opURL, s.HTTPClientFrom(s.operator))
}
