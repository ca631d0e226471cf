package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/forewarn/forewarn"
)

// A session's window is when it may start hosts: days of the week and a
// time of day range in UTC, "Mon-Fri 22:00-06:00" (a range that ends at
// or before its start runs past midnight, into the next day), "Sat,Sun
// 00:00-24:00", or "* 01:00-05:00" for every day. The hosts under way
// when a window closes go on; the next host waits for the next window.
type window struct {
	days       [7]bool // by time.Weekday of the window's start
	start, end int     // minutes from midnight; end may be 1440
}

// windows are a session's windows; none means always open.
type windows []window

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// parseWindows parses specs; each error names the spec.
func parseWindows(specs []string) (windows, error) {
	ws := make(windows, 0, len(specs))
	for _, s := range specs {
		w, err := parseWindow(s)
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "window %q: %v (want DAYS HH:MM-HH:MM in UTC, such as \"Mon-Fri 22:00-06:00\" or \"* 01:00-05:00\")", s, err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func parseWindow(s string) (window, error) {
	var w window
	f := strings.Fields(s)
	if len(f) != 2 {
		return w, fmt.Errorf("want two fields")
	}
	if f[0] == "*" {
		w.days = [7]bool{true, true, true, true, true, true, true}
	} else {
		for _, part := range strings.Split(f[0], ",") {
			a, b, isRange := strings.Cut(strings.ToLower(part), "-")
			from, ok := weekdays[a]
			if !ok {
				return w, fmt.Errorf("unknown day %q", a)
			}
			to := from
			if isRange {
				if to, ok = weekdays[b]; !ok {
					return w, fmt.Errorf("unknown day %q", b)
				}
			}
			for d := from; ; d = (d + 1) % 7 {
				w.days[d] = true
				if d == to {
					break
				}
			}
		}
	}
	a, b, ok := strings.Cut(f[1], "-")
	if !ok {
		return w, fmt.Errorf("want a time range HH:MM-HH:MM")
	}
	var err error
	if w.start, err = clock(a, false); err != nil {
		return w, err
	}
	if w.end, err = clock(b, true); err != nil {
		return w, err
	}
	if w.start == w.end {
		return w, fmt.Errorf("the range is empty")
	}
	return w, nil
}

// clock parses HH:MM into minutes from midnight; 24:00 only as an end.
func clock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	switch {
	case !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || mm < 0 || mm > 59 || hh < 0:
		return 0, fmt.Errorf("%q is not HH:MM", s)
	case hh == 24 && mm == 0 && end:
		return 1440, nil
	case hh > 23:
		return 0, fmt.Errorf("%q is not a time of day", s)
	}
	return hh*60 + mm, nil
}

// spans returns the window's span that began on the day of day (a UTC
// midnight), if the window runs that day.
func (w window) span(day time.Time) (time.Time, time.Time, bool) {
	if !w.days[day.Weekday()] {
		return time.Time{}, time.Time{}, false
	}
	from := day.Add(time.Duration(w.start) * time.Minute)
	to := day.Add(time.Duration(w.end) * time.Minute)
	if w.end <= w.start {
		to = to.Add(24 * time.Hour)
	}
	return from, to, true
}

// open reports whether t is inside a window.
func (ws windows) open(t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	t = t.UTC()
	today := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for _, w := range ws {
		for _, day := range []time.Time{today.AddDate(0, 0, -1), today} {
			if from, to, ok := w.span(day); ok && !t.Before(from) && t.Before(to) {
				return true
			}
		}
	}
	return false
}

// next returns when the next window opens after t (t itself when one is
// open).
func (ws windows) next(t time.Time) time.Time {
	if ws.open(t) {
		return t
	}
	t = t.UTC()
	today := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	var best time.Time
	for _, w := range ws {
		for i := range 8 {
			if from, _, ok := w.span(today.AddDate(0, 0, i)); ok && from.After(t) {
				if best.IsZero() || from.Before(best) {
					best = from
				}
				break
			}
		}
	}
	return best
}
