package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// Watch streams the server's transitions (GET /v1/watch): those after
// revision since, or from now on when since is 0, of the kinds given
// ("event", "session", "host"; none means all). Besides transitions it
// yields the stream's own lines as Transitions with only Kind and
// Revision: "reset" (list the state again, then go on from Revision: the
// server no longer held every transition after since, or a reload
// skipped commits, or this client read too slowly and the stream ends
// after it) and "heartbeat" (every transition up to Revision was sent).
// The sequence ends at the first error: the server's refusal as a
// *forewarn.Error, ctx's error, or EUNAVAILABLE when the stream ends.
// The http.Client must not have a Timeout, which would cut the stream.
func (c *Client) Watch(ctx context.Context, since int64, kinds ...string) iter.Seq2[engine.Transition, error] {
	return func(yield func(engine.Transition, error) bool) {
		q := url.Values{}
		if since > 0 {
			q.Set("since", strconv.FormatInt(since, 10))
		}
		if len(kinds) > 0 {
			q.Set("kind", strings.Join(kinds, ","))
		}
		path := "/v1/watch"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		resp, err := c.open(ctx, http.MethodGet, path, nil, "", "application/x-ndjson", nil)
		if err != nil {
			yield(engine.Transition{}, err)
			return
		}
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var t engine.Transition
			if err := dec.Decode(&t); err != nil {
				switch {
				case ctx.Err() != nil:
					err = ctx.Err()
				case errors.Is(err, io.EOF):
					err = forewarn.Errorf(forewarn.EUNAVAILABLE, "the server ended the watch stream")
				default:
					err = forewarn.Errorf(forewarn.EUNAVAILABLE, "reading the watch stream: %v", err)
				}
				yield(engine.Transition{}, err)
				return
			}
			if !yield(t, nil) {
				return
			}
		}
	}
}
