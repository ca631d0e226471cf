package connlimit

import (
	"io"
	"net/http"
	"time"
)

// BodyTimeout returns a handler that gives each request's body d to
// arrive, counted from the end of its headers, and then calls h. A
// request without a body, such as a held long-poll, gets no deadline:
// the server is not reading from it. Once the body has been read to its
// end the deadline is lifted, so a slow handler is not cut off.
//
// When h's answer closes the connection (Connection: close) without
// having read the whole body, the server does not wait for the rest of
// it, so a refused caller cannot hold the connection by trickling one.
//
// Unlike http.Server.ReadTimeout, which also cancels the context of a
// request that outlives it, this bounds only the reading of the request.
func BodyTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d <= 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			h.ServeHTTP(w, r) // not a connection that takes deadlines
			return
		}
		body := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = body
		h.ServeHTTP(w, r)
		if !body.done && w.Header().Get("Connection") == "close" {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// deadlineBody lifts the read deadline once the body has been read to
// its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
