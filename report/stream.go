package report

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
)

// Stream is a report being written: the JSON of the Report that Build
// returns, written one VM and one event at a time, so that writing it
// holds one VM's or one event's report however large the fleet, and
// however slowly the reader takes it. Start takes what it needs of the
// engine's events at once; WriteTo reads each VM's view and each event
// as it writes them.
type Stream struct {
	eng   *engine.Engine
	h     *history.History
	now   time.Time
	vm    string
	vms   []*forewarn.VM
	ids   []string             // the events, as Events orders them
	since map[string]time.Time // when each became visible
}

// Start returns the stream of the report of eng's fleet as h recorded
// it, at now, as Build takes its arguments. It copies the engine's
// events once, to learn their IDs and when each became visible, and
// keeps only that.
// Errors: ENOTFOUND for a vm not in the fleet.
func Start(eng *engine.Engine, h *history.History, now time.Time, vm string) (*Stream, error) {
	vms, err := selectVMs(eng.Fleet(), vm)
	if err != nil {
		return nil, err
	}
	events := eng.Events()
	s := &Stream{eng: eng, h: h, now: now, vm: vm, vms: vms, since: visibleSince(events), ids: make([]string, len(events))}
	for i, ev := range events {
		s.ids[i] = ev.ID
	}
	return s, nil
}

// WriteTo writes the report to w as json.Encoder writes a Report: the
// same bytes, and a newline. An event deleted since Start is left out.
func (s *Stream) WriteTo(w io.Writer) (int64, error) {
	var (
		buf     bytes.Buffer
		enc     = json.NewEncoder(&buf)
		written int64
	)
	// put encodes v after prefix, and writes them once buf holds enough.
	put := func(prefix string, v any, flush bool) error {
		buf.WriteString(prefix)
		if v != nil {
			if err := enc.Encode(v); err != nil {
				return err
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
		}
		if !flush && buf.Len() < 16<<10 {
			return nil
		}
		n, err := w.Write(buf.Bytes())
		written += int64(n)
		buf.Reset()
		return err
	}
	if err := put(`{"generated":`, s.now.UTC(), false); err != nil {
		return written, err
	}
	sep := `,"vms":[`
	for _, v := range s.vms {
		if err := put(sep, vmReport(v, s.eng.View(v.Name), s.h, s.since, s.now), false); err != nil {
			return written, err
		}
		sep = ","
	}
	if sep == "," {
		sep = ""
	} // else there are no VMs, and the list is still to open
	sep += `],"events":[`
	for _, id := range s.ids {
		ev, err := s.eng.Event(id)
		if err != nil {
			continue // gone since Start
		}
		e := eventReport(ev, s.h, s.since[id])
		if !concerns(ev, e, s.vm) {
			continue
		}
		if err := put(sep, e, false); err != nil {
			return written, err
		}
		sep = ","
	}
	if sep == "," {
		sep = ""
	}
	return written, put(sep+"]}\n", nil, true)
}
