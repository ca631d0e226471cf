package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/server"
)

// TestAdminAllowedHosts: the operator listener answers, over a real
// socket, requests for its own address, loopback names and the names of
// AdminAllowedHosts (--admin-allowed-hosts), and refuses others with 421;
// an allowed host with a port, a scheme or a wildcard is refused at
// start, naming the flag.
func TestAdminAllowedHosts(t *testing.T) {
	cfg := memConfig(t)
	cfg.AdminAllowedHosts = []string{"forewarn.corp.example"}
	s, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	adm := s.AdminAddr().String()
	_, port, _ := net.SplitHostPort(adm)
	hc := from(t, "127.0.0.1")
	for host, want := range map[string]int{
		adm:                                  200,
		"localhost:" + port:                  200,
		"forewarn.corp.example":              200,
		"forewarn.corp.example:443":          200,
		"rebind.evil.example:" + port:        421,
		"forewarn.corp.example.evil.example": 421,
	} {
		req, _ := http.NewRequest("GET", "http://"+adm+"/v1/vms", nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}

	for _, h := range []string{"forewarn.corp.example:8170", "https://forewarn.corp.example", "*.corp.example", ""} {
		cfg := memConfig(t)
		cfg.AdminAllowedHosts = []string{h}
		_, err := server.New(t.Context(), cfg)
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.HasPrefix(forewarn.ErrorMessage(err), "--admin-allowed-hosts: ") {
			t.Errorf("AdminAllowedHosts %q: %v, want EINVALID naming --admin-allowed-hosts", h, err)
		}
	}
}
