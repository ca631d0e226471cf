package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// PutVM creates or replaces the VM named name from its whole definition,
// a JSON object with the fleet file's keys. ifMatch, when not 0, is the
// inventory revision the change is made against.
// Errors: EINVALID for a bad definition, EPRECONDITION for a stale
// ifMatch.
func (c *Client) PutVM(ctx context.Context, name string, def []byte, ifMatch int64) (*VMDefinition, error) {
	var out VMDefinition
	err := c.send(ctx, http.MethodPut, "/v1/vms/"+url.PathEscape(name), def, "application/json", matchHeader(ifMatch), &out)
	return &out, err
}

// PatchVM changes the definition of the VM named name by a JSON merge
// patch (RFC 7396) of its fleet file keys.
// Errors: ENOTFOUND, EINVALID, EPRECONDITION.
func (c *Client) PatchVM(ctx context.Context, name string, patch []byte, ifMatch int64) (*VMDefinition, error) {
	var out VMDefinition
	err := c.send(ctx, http.MethodPatch, "/v1/vms/"+url.PathEscape(name), patch, "application/merge-patch+json", matchHeader(ifMatch), &out)
	return &out, err
}

// RemoveVM deregisters the VM named name: no Terminate, no notice.
// Errors: ENOTFOUND, EPRECONDITION.
func (c *Client) RemoveVM(ctx context.Context, name string, ifMatch int64) (*VMDefinition, error) {
	var out VMDefinition
	err := c.send(ctx, http.MethodDelete, "/v1/vms/"+url.PathEscape(name), nil, "", matchHeader(ifMatch), &out)
	return &out, err
}

// ApplyFleet makes the inventory equal to the fleet document doc (YAML
// or JSON) and returns what it changed; with dryRun it changes nothing
// and returns what it would change; with prune it removes the VMs doc
// does not name.
func (c *Client) ApplyFleet(ctx context.Context, doc []byte, dryRun, prune bool) (*Applied, error) {
	q := url.Values{}
	if dryRun {
		q.Set("dryRun", "true")
	}
	if prune {
		q.Set("prune", "true")
	}
	path := "/v1/fleet/apply"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out Applied
	err := c.send(ctx, http.MethodPost, path, doc, "application/yaml", nil, &out)
	return &out, err
}

// ExportFleet returns the inventory as a fleet file, and its revision.
func (c *Client) ExportFleet(ctx context.Context) ([]byte, int64, error) {
	var doc []byte
	hdr := http.Header{}
	if err := c.send(ctx, http.MethodGet, "/v1/fleet", nil, "", hdr, &doc); err != nil {
		return nil, 0, err
	}
	rev, _ := strconv.ParseInt(trimQuotes(hdr.Get("ETag")), 10, 64)
	return doc, rev, nil
}

// matchHeader returns the If-Match header of revision rev, nil for 0.
func matchHeader(rev int64) http.Header {
	if rev == 0 {
		return nil
	}
	return http.Header{"If-Match": {etag(rev)}}
}

func trimQuotes(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
