package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

const (
	eventCreateSynopsis     = "--type T --vm NAME [--vm NAME ...] [--notice D] [--duration S] [--source User|Platform] [--description TEXT] [--lasts D] [--started]"
	eventListSynopsis       = "[--json]"
	eventShowSynopsis       = "ID [--json]"
	eventActionSynopsis     = "ID"
	eventRescheduleSynopsis = "ID --not-before TIME"
)

const eventUsage = `usage: forewarn event <command> [arguments]

commands:
  create    ` + eventCreateSynopsis + `
  list      ` + eventListSynopsis + `
  show      ` + eventShowSynopsis + `
                  one event, whole: its times, approvals and VMs
  approve   ID    approve as the operator, which starts the event now
  start     ID    start a Scheduled event now
  complete  ID    end a Started event now
  cancel    ID    withdraw a Scheduled event
  reschedule ` + eventRescheduleSynopsis + `
                  move an EC2 scheduled event (TIME: RFC 3339, or a duration from now)

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
Run 'forewarn event <command> -h' for a command's flags.
`

// runEvent runs 'forewarn event ...' and returns the exit code.
func runEvent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, eventUsage)
		return 2
	}
	switch args[0] {
	case "create":
		return eventCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return eventList(ctx, args[1:], stdout, stderr)
	case "show":
		return eventShow(ctx, args[1:], stdout, stderr)
	case "approve", "start", "complete", "cancel":
		return eventAction(ctx, args[0], args[1:], stdout, stderr)
	case "reschedule":
		return eventReschedule(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, eventUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown event command %q\n\n%s", args[0], eventUsage)
	return 2
}

// eventCreate creates the events of one request and prints their IDs, one
// a line and nothing else, for scripts: one event per scope group of
// the VMs named.
func eventCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("event create", eventCreateSynopsis)
	var (
		typ, source, desc string
		vms               stringsFlag
		notice, lasts     durationFlag
		duration          intFlag
		started           bool
	)
	c.fs.StringVar(&typ, "type", "", "event `type`: Freeze, Reboot, Redeploy, Preempt or Terminate; MIGRATE_ON_HOST_MAINTENANCE or\nTERMINATE_ON_HOST_MAINTENANCE (gce); instance-reboot, system-reboot, system-maintenance,\ninstance-retirement or instance-stop (aws) (required)")
	c.fs.Var(&vms, "vm", "`name` of an affected VM; repeat for several (required)")
	c.fs.Var(&notice, "notice", "`duration` from now to NotBefore (default the type's minimum)")
	c.fs.Var(&duration, "duration", "announced impact in `seconds` (default -1, unknown)")
	c.fs.StringVar(&source, "source", "", "`source` of the event: User or Platform (default Platform)")
	c.fs.StringVar(&desc, "description", "", "`text` shown to the VMs")
	c.fs.Var(&lasts, "lasts", "`duration` the event stays Started before it completes (default per type)")
	c.fs.BoolVar(&started, "started", false, "create the event already Started, as an unplanned event")
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if typ == "" {
			return usagef("missing --type")
		}
		t, err := forewarn.ParseEventType(typ)
		if err != nil {
			return usagef("%s", message(err))
		}
		if len(vms) == 0 {
			return usagef("missing --vm")
		}
		req := admin.CreateRequest{Type: string(t), VMs: vms, Description: desc, Started: started}
		if source != "" {
			s, err := forewarn.ParseSource(source)
			if err != nil {
				return usagef("%s", message(err))
			}
			req.Source = string(s)
		}
		if notice.set {
			req.Notice = notice.d.String()
		}
		if lasts.set {
			req.Lasts = lasts.d.String()
		}
		if duration.set {
			req.Duration = &duration.n
		}
		cr, err := c.client().CreateEvents(ctx, req)
		if err != nil {
			return err
		}
		// One line per event: a request naming VMs of several scope
		// groups makes one event per group.
		for _, id := range cr.EventIDs {
			fmt.Fprintln(stdout, id)
		}
		return nil
	})
}

// eventList prints every event as a table, or as the API's JSON.
func eventList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[*forewarn.Event]{name: "event list", synopsis: eventListSynopsis, key: "events", fetch: (*admin.Client).Events,
		table: func(tw io.Writer, evs []*forewarn.Event) {
			fmt.Fprintln(tw, "ID\tTYPE\tSTATUS\tRESOURCES\tNOTBEFORE\tSOURCE")
			for _, ev := range evs {
				notBefore := "-"
				if !ev.NotBefore.IsZero() {
					notBefore = ev.NotBefore.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n",
					ev.ID, ev.Type, ev.Status, strings.Join(ev.Resources, ","), notBefore, ev.Source)
			}
		}}.run(ctx, args, stdout, stderr)
}

// eventShow prints one event, every field of it, or as the API's JSON.
func eventShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("event show", eventShowSynopsis)
	asJSON := c.fs.Bool("json", false, "print the event as GET /v1/events/{id} answers it")
	return c.run(args, stderr, func(pos []string) error {
		id, err := oneArg(pos, "event ID")
		if err != nil {
			return err
		}
		ev, err := c.client().Event(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, ev)
		}
		at := func(t time.Time) string {
			return dash(t.UTC().Format(time.RFC3339Nano), !t.IsZero())
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "ID:\t%s\n", ev.ID)
		fmt.Fprintf(tw, "Type:\t%s\n", ev.Type)
		fmt.Fprintf(tw, "Status:\t%s\n", ev.Status)
		fmt.Fprintf(tw, "Resources:\t%s\n", dash(strings.Join(ev.Resources, ","), len(ev.Resources) > 0))
		fmt.Fprintf(tw, "Source:\t%s\n", ev.Source)
		fmt.Fprintf(tw, "Description:\t%s\n", dash(strconv.Quote(ev.Description), ev.Description != ""))
		fmt.Fprintf(tw, "Duration:\t%s\n", dash(strconv.Itoa(ev.Duration)+"s", ev.Duration >= 0))
		fmt.Fprintf(tw, "Lasts:\t%s\n", ev.Lasts)
		if ev.Wave != "" {
			fmt.Fprintf(tw, "Wave:\t%s\n", ev.Wave)
		}
		if ev.Action != "" {
			fmt.Fprintf(tw, "Action:\t%s\n", ev.Action)
		}
		fmt.Fprintf(tw, "Created:\t%s\n", at(ev.Created))
		fmt.Fprintf(tw, "NotBefore:\t%s\n", at(ev.NotBefore))
		if ev.Lead() > 0 {
			fmt.Fprintf(tw, "Warned:\t%s\n", at(ev.WarnedAt))
		}
		if !ev.Deadline.IsZero() {
			fmt.Fprintf(tw, "Deadline:\t%s\n", at(ev.Deadline))
		}
		fmt.Fprintf(tw, "Started:\t%s\n", at(ev.StartedAt))
		fmt.Fprintf(tw, "Ended:\t%s\n", at(ev.EndedAt))
		if !ev.ResumedAt.IsZero() {
			fmt.Fprintf(tw, "Resumed:\t%s\n", at(ev.ResumedAt))
		}
		if len(ev.Approvals) == 0 {
			fmt.Fprintf(tw, "Approvals:\t-\n")
		}
		for i, a := range ev.Approvals {
			label := ""
			if i == 0 {
				label = "Approvals:"
			}
			fmt.Fprintf(tw, "%s\t%s by %s\n", label, at(a.At), a.By)
		}
		return tw.Flush()
	})
}

// eventAction approves, starts, completes or cancels one event and
// prints its resulting status.
func eventAction(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	c := newCommand("event "+action, eventActionSynopsis)
	return c.run(args, stderr, func(pos []string) error {
		id, err := oneArg(pos, "event ID")
		if err != nil {
			return err
		}
		cl := c.client()
		do := map[string]func(context.Context, string) (*forewarn.Event, error){
			"approve":  cl.Approve,
			"start":    cl.Start,
			"complete": cl.Complete,
			"cancel":   cl.Cancel,
		}[action]
		ev, err := do(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "event %s is %s\n", ev.ID, ev.Status)
		return nil
	})
}

// eventReschedule moves an EC2 scheduled event and prints its new
// NotBefore.
func eventReschedule(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("event reschedule", eventRescheduleSynopsis)
	notBefore := c.fs.String("not-before", "", "new NotBefore: an RFC 3339 `time` (2026-01-02T15:04:05Z) or a duration from now (36h) (required)")
	return c.run(args, stderr, func(pos []string) error {
		id, err := oneArg(pos, "event ID")
		if err != nil {
			return err
		}
		if *notBefore == "" {
			return usagef("missing --not-before")
		}
		at, err := time.Parse(time.RFC3339, *notBefore)
		if err != nil {
			d, derr := time.ParseDuration(*notBefore)
			if derr != nil || d <= 0 {
				return usagef("--not-before %q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration (36h)", *notBefore)
			}
			at = time.Now().Add(d)
		}
		ev, err := c.client().Reschedule(ctx, id, at)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "event %s starts at %s\n", ev.ID, ev.NotBefore.UTC().Format(time.RFC3339))
		return nil
	})
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
