package admin

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/forewarn/forewarn/engine"
)

// sessionsResponse is the body of GET /v1/sessions.
type sessionsResponse struct {
	Sessions []SessionView `json:"sessions"`
}

// CreateSession creates a maintenance session.
// Errors: EINVALID, ENOTFOUND for a host no VM names, ECONFLICT for a
// host under way in another session.
func (c *Client) CreateSession(ctx context.Context, req SessionRequest) (*SessionView, error) {
	var v SessionView
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Sessions returns every session, oldest first.
func (c *Client) Sessions(ctx context.Context) ([]SessionView, error) {
	var resp sessionsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Sessions, nil
}

// Session returns the session id. Errors: ENOTFOUND.
func (c *Client) Session(ctx context.Context, id string) (*SessionView, error) {
	return c.sessionCall(ctx, http.MethodGet, id, "")
}

// SessionAction pauses, resumes or cancels the session id (verb pause,
// resume or cancel) and returns it.
// Errors: ENOTFOUND, ECONFLICT for a session not in a state to do so.
func (c *Client) SessionAction(ctx context.Context, id, verb string) (*SessionView, error) {
	return c.sessionCall(ctx, http.MethodPost, id, "/"+verb)
}

func (c *Client) sessionCall(ctx context.Context, method, id, suffix string) (*SessionView, error) {
	var v SessionView
	if err := c.do(ctx, method, "/v1/sessions/"+url.PathEscape(id)+suffix, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// HostDone says the maintenance of host, InMaintenance, is done.
// Errors: ENOTFOUND, ECONFLICT for a host not InMaintenance.
func (c *Client) HostDone(ctx context.Context, host string) (*engine.HostInfo, error) {
	var h engine.HostInfo
	if err := c.do(ctx, http.MethodPost, "/v1/hosts/"+url.PathEscape(host)+"/done", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// HostFail says the maintenance of host failed, for reason.
// Errors: EINVALID without a reason, ENOTFOUND, ECONFLICT for a host
// not under way.
func (c *Client) HostFail(ctx context.Context, host, reason string) (*engine.HostInfo, error) {
	var h engine.HostInfo
	if err := c.do(ctx, http.MethodPost, "/v1/hosts/"+url.PathEscape(host)+"/fail", hostFailRequest{Reason: reason}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// WaitHost waits, for up to wait (at most 5m), until host reaches state
// (Notifying, Ready, InMaintenance, Done or Failed) in its newest
// session, and returns it.
// Errors: ECONFLICT when it failed or its session ended before it
// started, EUNAVAILABLE (504) when wait ran out, ENOTFOUND.
func (c *Client) WaitHost(ctx context.Context, host, state string, wait time.Duration) (*engine.HostInfo, error) {
	var h engine.HostInfo
	q := url.Values{"state": {state}, "timeout": {wait.String()}}
	if err := c.do(ctx, http.MethodGet, "/v1/hosts/"+url.PathEscape(host)+"/wait?"+q.Encode(), nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
