package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// Client speaks the operator API of one server.
//
// Errors the server answers come back as *forewarn.Error with the
// server's code and message, so forewarn.ErrorCode works on them. When
// the server cannot be reached at all, the error has code EUNAVAILABLE.
type Client struct {
	// Token, when set, is sent as the bearer token.
	Token string
	base  string
	hc    *http.Client
}

// NewClient returns a client of the server at baseURL, such as
// "http://127.0.0.1:8170", that sends requests with hc, or with
// http.DefaultClient when hc is nil.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// CreateEvent creates the events of req and returns the first: one
// event, unless req names VMs of several scope groups (see CreateEvents).
// Errors: EINVALID for a bad request, ENOTFOUND for an unknown VM.
func (c *Client) CreateEvent(ctx context.Context, req CreateRequest) (*forewarn.Event, error) {
	cr, err := c.CreateEvents(ctx, req)
	if err != nil {
		return nil, err
	}
	return &cr.Event, nil
}

// CreateEvents creates the events of req, one per scope group of the
// VMs it names, and returns the first with the IDs of all.
func (c *Client) CreateEvents(ctx context.Context, req CreateRequest) (*Created, error) {
	var cr Created
	if err := c.do(ctx, http.MethodPost, "/v1/events", req, &cr); err != nil {
		return nil, err
	}
	return &cr, nil
}

// Events returns every event, active and ended, oldest first.
func (c *Client) Events(ctx context.Context) ([]*forewarn.Event, error) {
	var resp eventsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/events", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Events, nil
}

// Event returns the event with the given ID.
// Errors: ENOTFOUND.
func (c *Client) Event(ctx context.Context, id string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodGet, "/v1/events/"+url.PathEscape(id))
}

// Approve approves the event as the operator, which starts a Scheduled
// event at once, and returns the event as it then is.
// Errors: ENOTFOUND.
func (c *Client) Approve(ctx context.Context, id string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/approve")
}

// Start starts a Scheduled event now and returns it.
// Errors: ENOTFOUND, ECONFLICT when the event is not Scheduled.
func (c *Client) Start(ctx context.Context, id string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/start")
}

// Complete ends a Started event now and returns it.
// Errors: ENOTFOUND, ECONFLICT when the event is not Started.
func (c *Client) Complete(ctx context.Context, id string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/complete")
}

// Cancel withdraws a Scheduled event and returns it.
// Errors: ENOTFOUND, ECONFLICT when the event is not Scheduled.
func (c *Client) Cancel(ctx context.Context, id string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/cancel")
}

// VM returns the VM named name with what it sees now on its metadata
// API and its recent metadata requests, newest first.
func (c *Client) VM(ctx context.Context, name string) (*VMDetail, error) {
	var d VMDetail
	if err := c.do(ctx, http.MethodGet, "/v1/vms/"+url.PathEscape(name), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// VMs returns every VM of the fleet with its topology, state,
// incarnation, whether its scheduled events are enabled, when it last
// called its metadata API, and the active events it sees.
func (c *Client) VMs(ctx context.Context) ([]engine.VMInfo, error) {
	var resp vmsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/vms", nil, &resp); err != nil {
		return nil, err
	}
	return resp.VMs, nil
}

// Restart creates a User Reboot of the VM named name with the given
// notice, 0 meaning the minimum.
// Errors: ENOTFOUND for an unknown VM, EINVALID for a bad notice.
func (c *Client) Restart(ctx context.Context, name string, notice time.Duration) (*forewarn.Event, error) {
	return c.vmEvent(ctx, name, "restart", notice)
}

// Redeploy creates a User Redeploy of the VM named name with the given
// notice, 0 meaning the minimum.
// Errors: ENOTFOUND for an unknown VM, EINVALID for a bad notice.
func (c *Client) Redeploy(ctx context.Context, name string, notice time.Duration) (*forewarn.Event, error) {
	return c.vmEvent(ctx, name, "redeploy", notice)
}

// Evict preempts the Spot or preemptible VM named name: an Azure VM gets
// a Preempt with 30 s notice, a Compute Engine VM is preempted at once.
// Errors: ENOTFOUND for an unknown VM, EINVALID for a VM that cannot be
// evicted, ECONFLICT for one already being preempted.
func (c *Client) Evict(ctx context.Context, name string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(name)+"/evict")
}

// EvictWith is Evict with options: an EC2 Spot VM's interruption after
// notice (at least two minutes), and how long the VM takes to stop or
// terminate (lasts); zero values take the defaults.
// Errors: as Evict, and EINVALID for a notice on a VM that is not EC2.
func (c *Client) EvictWith(ctx context.Context, name string, notice, lasts time.Duration) (*forewarn.Event, error) {
	return c.vmOptions(ctx, name, "evict", notice, lasts)
}

// DeleteWith is Delete with how long the Terminate stays Started (lasts),
// 0 meaning the default.
// Errors: as Delete.
func (c *Client) DeleteWith(ctx context.Context, name string, lasts time.Duration) (*forewarn.Event, error) {
	return c.vmOptions(ctx, name, "delete", 0, lasts)
}

func (c *Client) vmOptions(ctx context.Context, name, action string, notice, lasts time.Duration) (*forewarn.Event, error) {
	var req vmRequest
	if notice != 0 {
		req.Notice = notice.String()
	}
	if lasts != 0 {
		req.Lasts = lasts.String()
	}
	var ev forewarn.Event
	if err := c.do(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(name)+"/"+action, req, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// Reschedule moves the EC2 scheduled event id to start at notBefore,
// and returns it as it now is.
// Errors: ENOTFOUND, EINVALID for an event that is not an EC2 scheduled
// event or a time in the past or after its NotBeforeDeadline, ECONFLICT
// for an event that is not Scheduled.
func (c *Client) Reschedule(ctx context.Context, id string, notBefore time.Time) (*forewarn.Event, error) {
	var ev forewarn.Event
	req := rescheduleRequest{NotBefore: notBefore.UTC().Format(time.RFC3339)}
	if err := c.do(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/reschedule", req, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// StartVM starts again the Compute Engine VM named name, stopped by a
// preemption, and returns it as it is now.
// Errors: ENOTFOUND for an unknown VM, EINVALID for an Azure VM,
// ECONFLICT for a VM that is not stopped.
func (c *Client) StartVM(ctx context.Context, name string) (*engine.VMInfo, error) {
	var info engine.VMInfo
	if err := c.do(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(name)+"/start", nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ScaleSets returns every scale set with its Terminate settings in force.
func (c *Client) ScaleSets(ctx context.Context) ([]engine.ScaleSetInfo, error) {
	var resp scaleSetsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/scalesets", nil, &resp); err != nil {
		return nil, err
	}
	return resp.ScaleSets, nil
}

// Hosts returns every host a VM of the fleet names, by name, each with
// its VMs' names, sorted.
func (c *Client) Hosts(ctx context.Context) ([]engine.HostInfo, error) {
	var resp hostsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/hosts", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Hosts, nil
}

// Host returns the host named name with its VMs' names, sorted.
// Errors: ENOTFOUND when no VM names that host.
func (c *Client) Host(ctx context.Context, name string) (*engine.HostInfo, error) {
	var h engine.HostInfo
	if err := c.do(ctx, http.MethodGet, "/v1/hosts/"+url.PathEscape(name), nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// SetScaleSet changes the Terminate settings of the scale set named name:
// timeout, when not empty, is an ISO 8601 or Go duration; notifications,
// when not nil, turns Terminate notifications on or off.
// Errors: ENOTFOUND for an unknown scale set, EINVALID for a bad timeout
// or nothing to change.
func (c *Client) SetScaleSet(ctx context.Context, name, timeout string, notifications *bool) (*engine.ScaleSetInfo, error) {
	req := scaleSetRequest{TerminateNotifications: notifications}
	if timeout != "" {
		req.TerminateTimeout = &timeout
	}
	var info engine.ScaleSetInfo
	if err := c.do(ctx, http.MethodPatch, "/v1/scalesets/"+url.PathEscape(name), req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Delete deletes the scale set VM named name as a scale-in does: a User
// Terminate with the scale set's notBeforeTimeout as notice, after which
// the VM is gone. A Spot VM, or one of a scale set whose Terminate
// notifications are off, is deleted at once, its Terminate Completed
// without notice.
// Errors: ENOTFOUND for an unknown VM, EINVALID for a VM outside a scale
// set, ECONFLICT for one already deleted or being deleted.
func (c *Client) Delete(ctx context.Context, name string) (*forewarn.Event, error) {
	return c.event(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(name)+"/delete")
}

// Degrade raises the Platform Redeploy of a predicted hardware failure of
// the VM named name, with the given notice, 0 meaning 7 days.
// Errors: ENOTFOUND for an unknown VM, EINVALID for a VM that cannot be
// redeployed or a notice below the minimum.
func (c *Client) Degrade(ctx context.Context, name string, notice time.Duration) (*forewarn.Event, error) {
	return c.vmEvent(ctx, name, "degrade", notice)
}

// StartWave starts a platform maintenance wave over a scope: one event
// per update domain, each raised once the previous one has ended. It
// returns the wave with its first domain Scheduled (or Started, when
// none of its VMs has scheduled events enabled) and the rest Pending.
// Errors: ENOTFOUND for an unknown scope, EINVALID for a bad type or
// notice, or a scope name used by more than one kind of scope.
func (c *Client) StartWave(ctx context.Context, req WaveRequest) (*engine.Wave, error) {
	var w engine.Wave
	if err := c.do(ctx, http.MethodPost, "/v1/maintenance", req, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Cluster returns the replicas sharing the server's store.
func (c *Client) Cluster(ctx context.Context) (*forewarn.ClusterStatus, error) {
	var out forewarn.ClusterStatus
	if err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Waves returns every maintenance wave with its progress, oldest first.
func (c *Client) Waves(ctx context.Context) ([]*engine.Wave, error) {
	var resp wavesResponse
	if err := c.do(ctx, http.MethodGet, "/v1/maintenance", nil, &resp); err != nil {
		return nil, err
	}
	return resp.Waves, nil
}

func (c *Client) vmEvent(ctx context.Context, name, action string, notice time.Duration) (*forewarn.Event, error) {
	var req vmRequest
	if notice != 0 {
		req.Notice = notice.String()
	}
	var ev forewarn.Event
	if err := c.do(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(name)+"/"+action, req, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// event sends a body-less request answered with one event.
func (c *Client) event(ctx context.Context, method, path string) (*forewarn.Event, error) {
	var ev forewarn.Event
	if err := c.do(ctx, method, path, nil, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// do sends in (when not nil) as JSON to path and decodes a successful
// answer into out, or the server's error into a *forewarn.Error.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	if in == nil {
		return c.send(ctx, method, path, nil, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	return c.send(ctx, method, path, b, "application/json", nil, out)
}

// open sends body (when not nil) as contentType to path with the extra
// header hdr, asking for accept, and returns a 2xx answer, whose body
// the caller closes, or the error the server or the network gave.
func (c *Client) open(ctx context.Context, method, path string, body []byte, contentType, accept string, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "bad server URL %q: %v", c.base, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", accept)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, forewarn.Errorf(forewarn.EUNAVAILABLE, "cannot reach the server at %s: %v", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// send sends body (when not nil) as contentType to path with the extra
// header hdr, and decodes a successful answer into out: JSON, or the
// raw bytes when out is a *[]byte (with the answer's ETag in hdr's
// place, when hdr is not nil).
func (c *Client) send(ctx context.Context, method, path string, body []byte, contentType string, hdr http.Header, out any) error {
	resp, err := c.open(ctx, method, path, body, contentType, "application/json", hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if raw, ok := out.(*[]byte); ok {
		*raw, err = io.ReadAll(resp.Body)
		if err != nil {
			return forewarn.Errorf(forewarn.EUNAVAILABLE, "reading the answer of %s %s: %v", method, path, err)
		}
		if hdr != nil {
			hdr.Set("ETag", resp.Header.Get("ETag"))
		}
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response of %s %s: %w", method, path, err)
	}
	return nil
}

// responseError returns the error a non-2xx answer carries. An answer
// without the API's error body (from a proxy, say) gets the code its
// status suggests.
func responseError(resp *http.Response) error {
	var body errorResponse
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	if err == nil && json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		return &forewarn.Error{Code: body.Error.Code, Message: body.Error.Message}
	}
	code := forewarn.EINTERNAL
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		code = forewarn.EINVALID
	case http.StatusNotFound:
		code = forewarn.ENOTFOUND
	case http.StatusConflict:
		code = forewarn.ECONFLICT
	case http.StatusPreconditionFailed:
		code = forewarn.EPRECONDITION
	case http.StatusForbidden:
		code = forewarn.EFORBIDDEN
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		code = forewarn.EUNAVAILABLE
	}
	return forewarn.Errorf(code, "unexpected answer %q from %s %s", resp.Status, resp.Request.Method, resp.Request.URL)
}
