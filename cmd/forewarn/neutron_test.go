package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNeutronServeFlags: --neutron-addr and --neutron-secret-file need
// each other, and --neutron-proxies takes prefixes and addresses only;
// each refusal names the flag, before anything starts.
func TestNeutronServeFlags(t *testing.T) {
	// A server that wrongly starts stops at once: its context is done.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a-neutron-shared-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--neutron-addr", "127.0.0.1:0"}, 1,
			"forewarn serve: --neutron-addr needs --neutron-secret-file FILE: the shared secret (neutron's metadata_proxy_shared_secret) that signs each request's instance ID\n"},
		{[]string{"--neutron-secret-file", secret}, 1,
			"forewarn serve: --neutron-secret-file needs --neutron-addr, the neutron listener it configures\n"},
		{[]string{"--neutron-proxies", "10.0.0.0/8"}, 1,
			"forewarn serve: --neutron-proxies needs --neutron-addr, the neutron listener it configures\n"},
		{[]string{"--neutron-addr", "127.0.0.1:0", "--neutron-secret-file", secret, "--neutron-proxies", "10.0.0.0/33"}, 2,
			`invalid value "10.0.0.0/33" for flag -neutron-proxies: "10.0.0.0/33" is not an address or a CIDR prefix` + "\n"},
		{[]string{"--neutron-addr", "127.0.0.1:0", "--neutron-secret-file", secret, "--neutron-proxies", "10.0.0.0/8,neutron-1"}, 2,
			`invalid value "10.0.0.0/8,neutron-1" for flag -neutron-proxies: "neutron-1" is not an address or a CIDR prefix` + "\n"},
	} {
		var stdout, stderr strings.Builder
		code := runServe(ctx, append([]string{"--store", "mem", "--data", t.TempDir(),
			"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.args...), &stdout, &stderr)
		// A flag error is followed by the usage.
		if got, _, _ := strings.Cut(stderr.String(), "Usage of"); code != c.code || got != c.stderr {
			t.Errorf("%q: exit %d, stderr %q, want %d %q", c.args, code, got, c.code, c.stderr)
		}
	}
}

// TestNeutronServe: 'forewarn serve --neutron-addr' says where its
// neutron listener listens, and answers there a request neutron's
// metadata proxy signed, from an address --neutron-proxies lists.
func TestNeutronServe(t *testing.T) {
	dir := t.TempDir()
	const instance, project, secret = "2f1c6a52-8d2e-4b7a-9c3e-5a1b7d0e4f61", "8a3b1c2d4e5f60718293a4b5c6d7e8f9", "a-neutron-shared-secret"
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte("vms:\n  - {name: "+instance+", ip: 10.0.0.5, network: "+project+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, []string{"--store", "mem", "--data", filepath.Join(dir, "data"), "--fleet", fleet,
			"--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--neutron-addr", "127.0.0.1:0", "--neutron-secret-file", secretFile, "--neutron-proxies", "127.0.0.1, ::1/128"},
			w, &stderr)
		w.Close()
	}()
	// Serve prints its listeners' lines before it serves: the metadata
	// API's, the operator API's, then the neutron listener's.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var printed []string
	for len(printed) < 3 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited after printing %q; stderr: %s", printed, stderr.String())
			}
			printed = append(printed, l)
		case <-time.After(30 * time.Second):
			t.Fatalf("serve printed only %q", printed)
		}
	}
	go func() {
		for range lines {
		}
	}()
	addr, ok := strings.CutPrefix(printed[2], "neutron listener on 127.0.0.1:")
	if !ok {
		t.Fatalf("serve printed %q, want a neutron listener line last", printed)
	}

	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(instance))
	req, err := http.NewRequest("GET", "http://127.0.0.1:"+addr+"/metadata/instance/compute/name?api-version=2021-02-01&format=text", nil)
	req.Header = http.Header{"Metadata": {"true"}, "X-Forwarded-For": {"10.0.0.5"}, "X-Instance-Id": {instance},
		"X-Tenant-Id": {project}, "X-Instance-Id-Signature": {hex.EncodeToString(m.Sum(nil))}}
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hc.CloseIdleConnections()
	if resp.StatusCode != 200 || string(body) != instance {
		t.Errorf("a signed request: %d %q, want 200 %q", resp.StatusCode, body, instance)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d; stderr: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return")
	}
}
