// Package linklocal holds what the metadata clients share about reaching
// a metadata server: checking its base URL, and an HTTP client that
// never goes through a proxy.
package linklocal

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ParseBase checks that s is an http or https URL with a host, and
// returns it without a trailing slash.
func ParseBase(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err == nil && (u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
		err = errors.New("want an http or https URL with a host")
	}
	return u, err
}

// Client returns an HTTP client for a metadata server: no proxy (the
// server is link-local, and the real ones refuse proxied requests), a
// 5-second dial, idlePerHost kept connections, and timeout on each whole
// request (0 for none, when each attempt is bounded otherwise).
func Client(timeout time.Duration, idlePerHost int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			MaxIdleConnsPerHost: idlePerHost,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}
