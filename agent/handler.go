package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// maxOutput caps how much of a command's output is kept for the log.
const maxOutput = 16 << 10

// waitDelay is how long a killed command's pipes may stay open (held by
// a grandchild) before the agent stops waiting for them.
const waitDelay = 5 * time.Second

// environment returns the FOREWARN_* variables describing n to a handler
// command, as KEY=value strings; vm is this VM's name.
func environment(n forewarn.Notice, vm string) []string {
	return []string{
		"FOREWARN_EVENT_ID=" + n.ID,
		"FOREWARN_EVENT_TYPE=" + n.Type,
		"FOREWARN_EVENT_STATUS=" + n.Status,
		"FOREWARN_NOT_BEFORE=" + formatTime(n.NotBefore),
		"FOREWARN_RESOURCES=" + strings.Join(n.Resources, ","),
		"FOREWARN_EVENT_SOURCE=" + n.Source,
		"FOREWARN_DURATION_SECONDS=" + strconv.Itoa(n.Duration),
		"FOREWARN_DESCRIPTION=" + n.Description,
		"FOREWARN_PROVIDER=" + string(n.Provider),
		"FOREWARN_VM=" + vm,
	}
}

// runExec runs one command for n, kind exec or on_clear, and reports
// whether it exited 0 within the handler timeout.
func (a *Agent) runExec(ctx context.Context, kind, command string, n forewarn.Notice) bool {
	log := a.log.With("event", n.ID, "type", n.Type, "kind", kind, "command", command)
	if a.cfg.DryRun {
		log.Info("dry run: would run")
		return true
	}
	body, err := json.Marshal(n)
	if err != nil {
		log.Error("encode event", "err", err)
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.HandlerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), environment(n, a.self)...)
	cmd.Stdin = bytes.NewReader(body)
	out := &tailBuffer{max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	setProcessGroup(cmd)
	cmd.WaitDelay = waitDelay

	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	ok := err == nil
	a.metrics.observe(kind, ok, took.Seconds())
	attrs := []any{"seconds", took.Seconds()}
	if o := out.String(); o != "" {
		attrs = append(attrs, "output", o)
	}
	switch {
	case ok:
		log.Info("handler succeeded", attrs...)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		log.Error("handler timed out; its process group was killed", append(attrs, "timeout", a.cfg.HandlerTimeout.String())...)
	case ctx.Err() != nil:
		log.Warn("handler cancelled; its process group was killed", attrs...)
	default:
		log.Error("handler failed", append(attrs, "err", err)...)
	}
	return ok
}

// runWebhook POSTs n as JSON to url and reports whether the answer was
// 2xx within the handler timeout.
func (a *Agent) runWebhook(ctx context.Context, url string, n forewarn.Notice) bool {
	log := a.log.With("event", n.ID, "type", n.Type, "kind", kindWebhook, "url", url)
	if a.cfg.DryRun {
		log.Info("dry run: would post")
		return true
	}
	start := time.Now()
	err := a.post(ctx, url, n)
	took := time.Since(start)
	a.metrics.observe(kindWebhook, err == nil, took.Seconds())
	if err != nil {
		log.Error("handler failed", "seconds", took.Seconds(), "err", err)
		return false
	}
	log.Info("handler succeeded", "seconds", took.Seconds())
	return true
}

func (a *Agent) post(ctx context.Context, url string, n forewarn.Notice) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.HandlerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "forewarn-agent")
	resp, err := a.webhook.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	s := strings.TrimRight(string(t.b), "\n")
	if t.cut {
		return "…" + s
	}
	return s
}
