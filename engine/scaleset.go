package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// ScaleSetInfo is a scale set's Terminate settings in force, for the
// operator.
type ScaleSetInfo struct {
	Name string `json:"name"`
	// TerminateTimeout is the notice of new deletes (notBeforeTimeout).
	TerminateTimeout time.Duration `json:"-"`
	// TerminateNotifications reports whether a delete raises a Terminate.
	TerminateNotifications bool `json:"terminateNotifications"`
	// Source is "fleet" when the fleet file's settings are in force, and
	// "operator" once they were changed at run time.
	Source string `json:"source"`
	// VMs counts the scale set's VMs.
	VMs int `json:"vms"`
}

// ScaleSetChange is a run-time change of a scale set's settings; nil
// fields are left as they are.
type ScaleSetChange struct {
	TerminateTimeout       *time.Duration
	TerminateNotifications *bool
}

// scaleSetSettings returns the settings in force for the scale set named
// name. e.mu must be held, or the engine not yet shared.
func (e *Engine) scaleSetSettings(name string) forewarn.ScaleSetRecord {
	if r, ok := e.setOverrides[name]; ok {
		return r
	}
	// The scale sets alone: listing the fleet's VMs is not needed.
	return (&forewarn.Fleet{ScaleSets: e.cur().setList}).ScaleSetSettings(name)
}

// lockedScaleSetSettings is scaleSetSettings for callers without the lock.
func (e *Engine) lockedScaleSetSettings(name string) forewarn.ScaleSetRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.scaleSetSettings(name)
}

// ScaleSets returns every scale set of the fleet with its settings in
// force, by name.
func (e *Engine) ScaleSets() []ScaleSetInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	inv := e.cur()
	names := inv.scaleSetNames()
	out := make([]ScaleSetInfo, 0, len(names))
	for _, name := range names {
		vms, _ := inv.scaleSetVMs(name)
		out = append(out, e.scaleSetInfo(name, len(vms)))
	}
	slices.SortFunc(out, func(a, b ScaleSetInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// TimeoutISO returns the Terminate timeout in ISO 8601, such as PT10M.
func (i ScaleSetInfo) TimeoutISO() string { return isoDuration(i.TerminateTimeout) }

// scaleSetJSON is ScaleSetInfo's JSON form, the timeout in ISO 8601.
type scaleSetJSON struct {
	scaleSetFields
	TerminateTimeout string `json:"terminateNotBeforeTimeout"`
}

type scaleSetFields ScaleSetInfo

// MarshalJSON renders the timeout as an ISO 8601 duration, as the fleet
// file and Azure write it (PT10M).
func (i ScaleSetInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(scaleSetJSON{scaleSetFields(i), i.TimeoutISO()})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (i *ScaleSetInfo) UnmarshalJSON(b []byte) error {
	var j scaleSetJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*i = ScaleSetInfo(j.scaleSetFields)
	d, err := time.ParseDuration(strings.ToLower(strings.TrimPrefix(j.TerminateTimeout, "PT")))
	if err != nil || !strings.HasPrefix(j.TerminateTimeout, "PT") {
		return fmt.Errorf("terminateNotBeforeTimeout %q is not a PTnMnS duration", j.TerminateTimeout)
	}
	i.TerminateTimeout = d
	return nil
}

// isoDuration renders d, at most hours long, as PTnM or PTnMnS, with a
// fraction of a second where d has one.
func isoDuration(d time.Duration) string {
	m, rest := d/time.Minute, d%time.Minute
	if rest == 0 {
		return fmt.Sprintf("PT%dM", m)
	}
	return fmt.Sprintf("PT%dM%sS", m, strconv.FormatFloat(rest.Seconds(), 'f', -1, 64))
}

// scaleSetInfo describes the scale set name. e.mu must be held.
func (e *Engine) scaleSetInfo(name string, vms int) ScaleSetInfo {
	r := e.scaleSetSettings(name)
	src := "fleet"
	if _, ok := e.setOverrides[name]; ok {
		src = "operator"
	}
	return ScaleSetInfo{Name: name, TerminateTimeout: r.TerminateTimeout, TerminateNotifications: r.TerminateNotifications, Source: src, VMs: vms}
}

// SetScaleSet changes a scale set's Terminate settings at run time (seed
// 004: "Modifiable timeout value"). The change is stored before it is
// acknowledged, applies to deletes raised from now on (pending Terminates
// keep their NotBefore), and outlives restarts: it overrides the fleet
// file's settings for that scale set until changed again.
// Errors: ENOTFOUND for an unknown scale set, EINVALID for a timeout
// outside 5 to 15 minutes or not whole seconds, or an empty change.
func (e *Engine) SetScaleSet(ctx context.Context, name string, c ScaleSetChange) (info ScaleSetInfo, err error) {
	err = e.retry(ctx, func(ctx context.Context) error {
		info, err = e.setScaleSet(ctx, name, c)
		return err
	})
	return info, err
}

func (e *Engine) setScaleSet(ctx context.Context, name string, c ScaleSetChange) (ScaleSetInfo, error) {
	if c.TerminateTimeout == nil && c.TerminateNotifications == nil {
		return ScaleSetInfo{}, forewarn.Errorf(forewarn.EINVALID, "nothing to change: give a Terminate timeout, Terminate notifications, or both")
	}
	if t := c.TerminateTimeout; t != nil && (*t < forewarn.MinTerminateTimeout || *t > forewarn.MaxTerminateTimeout || *t%time.Second != 0) {
		return ScaleSetInfo{}, forewarn.Errorf(forewarn.EINVALID, "Terminate timeout %s is not a whole number of seconds from PT5M to PT15M (5m to 15m)", *t)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ScaleSetInfo{}, errClosed
	}
	vms, ok := e.cur().scaleSetVMs(name)
	if !ok {
		return ScaleSetInfo{}, forewarn.Errorf(forewarn.ENOTFOUND, "no scale set is named %q", name)
	}
	r := e.scaleSetSettings(name)
	if c.TerminateTimeout != nil {
		r.TerminateTimeout = *c.TerminateTimeout
	}
	if c.TerminateNotifications != nil {
		r.TerminateNotifications = *c.TerminateNotifications
	}
	covered, err := e.write(ctx, &forewarn.Change{ScaleSets: map[string]*forewarn.ScaleSetRecord{name: &r}})
	if err != nil {
		return ScaleSetInfo{}, err
	}
	if covered {
		return e.scaleSetInfo(name, len(vms)), nil
	}
	e.setOverrides[name] = r
	e.log.Info("scale set changed", "scaleSet", name, "terminateTimeout", r.TerminateTimeout, "terminateNotifications", r.TerminateNotifications)
	return e.scaleSetInfo(name, len(vms)), nil
}
