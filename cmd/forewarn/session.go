package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

const (
	sessionCreateSynopsis = "--hosts H1,H2,... | --all-hosts [--max-hosts N] [--max-unavailable N|P%|KIND=N|P% ...] [--delay D] [--notice D] [--reply-timeout D] [--action Freeze|Reboot|Redeploy] [--window 'DAYS HH:MM-HH:MM' ...] [--description TEXT] [--webhook URL ...] [--json]"
	sessionIDSynopsis     = "ID [--json]"
)

const sessionUsage = `usage: forewarn session <command> [arguments]

commands:
  create  ` + sessionCreateSynopsis + `
          take hosts down one after another: each VM on a host gets its
          provider's host maintenance event; the host is Ready once every
          event started; 'forewarn host done HOST' ends it
  list    [--json]
          every session with its state and its hosts' progress
  show    ` + sessionIDSynopsis + `
          one session, host by host
  pause   ` + sessionIDSynopsis + `
          start no more hosts; the hosts under way go on
  resume  ` + sessionIDSynopsis + `
          start hosts again, where the session stopped
  cancel  ` + sessionIDSynopsis + `
          end the session: its events not yet started are cancelled

--max-unavailable caps the VMs down at once in each group: N or P% for
every kind of group, or KIND=N|P% for one (availabilitySet, scaleSet,
placementGroup, updateDomain, zone). Windows are in UTC: 'Mon-Fri
22:00-06:00', '* 01:00-05:00'.

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
`

// runSession runs 'forewarn session ...' and returns the exit code.
func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, sessionUsage)
		return 2
	}
	switch args[0] {
	case "create":
		return sessionCreate(ctx, args[1:], stdout, stderr)
	case "list":
		return listCommand[admin.SessionView]{name: "session list", synopsis: "[--json]", key: "sessions", fetch: (*admin.Client).Sessions,
			table: printSessions}.run(ctx, args[1:], stdout, stderr)
	case "show", "pause", "resume", "cancel":
		return sessionCall(ctx, args[0], args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, sessionUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown session command %q\n\n%s", args[0], sessionUsage)
	return 2
}

// sessionCreate creates a session and prints it.
func sessionCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("session create", sessionCreateSynopsis)
	var req admin.SessionRequest
	var budgets []string
	c.fs.Func("hosts", "`H1,H2,...`: the hosts, in the order to take them", appendList(&req.Hosts))
	c.fs.BoolVar(&req.AllHosts, "all-hosts", false, "every host a VM names, by name")
	c.fs.IntVar(&req.MaxHosts, "max-hosts", 1, "hosts under way at once")
	c.fs.Func("max-unavailable", "`N|P%|KIND=N|P%`: VMs down at once per group (repeatable)", appendList(&budgets))
	c.fs.StringVar(&req.Delay, "delay", "", "wait after each host ends before the next starts (such as 10m)")
	c.fs.StringVar(&req.Notice, "notice", "", "the events' notice (default: each type's minimum)")
	c.fs.StringVar(&req.ReplyTimeout, "reply-timeout", "", "fail a host whose events have not all started this long after their NotBefore")
	c.fs.StringVar(&req.Action, "action", "Reboot", "the Azure event, Freeze, Reboot or Redeploy (EC2 VMs get system-reboot for Reboot, else system-maintenance)")
	c.fs.Func("window", "`'DAYS HH:MM-HH:MM'` in UTC when hosts may start (repeatable)", func(v string) error {
		req.Windows = append(req.Windows, v)
		return nil
	})
	c.fs.StringVar(&req.Description, "description", "", "the events' description")
	c.fs.Func("webhook", "`URL` that receives this session's transitions (repeatable)", appendList(&req.Webhooks))
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if len(req.Hosts) == 0 && !req.AllHosts {
			return usagef("give --hosts H1,H2,... or --all-hosts")
		}
		var err error
		if req.MaxUnavailable, err = budgetFlags(budgets); err != nil {
			return err
		}
		v, err := c.client().CreateSession(ctx, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, v)
		}
		return printSession(stdout, v)
	})
}

// budgetFlags reads --max-unavailable values: N or P% for every group
// kind, KIND=N|P% for one.
func budgetFlags(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string)
	for _, v := range vals {
		kind, b, one := strings.Cut(v, "=")
		if !one {
			kind, b = "", v
		}
		if _, err := admin.ParseBudget(kind, b); err != nil || one && !slices.Contains(forewarn.GroupKinds, kind) {
			return nil, usagef("--max-unavailable %s: want N, P%%, or KIND=N|P%% with KIND one of %s", v, strings.Join(forewarn.GroupKinds, ", "))
		}
		if one {
			out[kind] = b
			continue
		}
		for _, k := range forewarn.GroupKinds {
			out[k] = b
		}
	}
	return out, nil
}

// sessionCall runs show, pause, resume or cancel on one session.
func sessionCall(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) int {
	c := newCommand("session "+verb, sessionIDSynopsis)
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		id, err := oneArg(pos, "session ID")
		if err != nil {
			return err
		}
		var v *admin.SessionView
		if verb == "show" {
			v, err = c.client().Session(ctx, id)
		} else {
			v, err = c.client().SessionAction(ctx, id, verb)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, v)
		}
		return printSession(stdout, v)
	})
}

// progress counts a session's hosts by state: "2 done, 1 in maintenance
// of 5".
func progress(v *admin.SessionView) string {
	n := map[forewarn.HostState]int{}
	for _, h := range v.Hosts {
		n[h.State]++
	}
	var parts []string
	for _, s := range []forewarn.HostState{forewarn.HostDone, forewarn.HostFailed, forewarn.HostInMaintenance, forewarn.HostNotifying} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], strings.ToLower(string(s))))
		}
	}
	if len(parts) == 0 {
		parts = []string{"none started"}
	}
	return fmt.Sprintf("%s of %d", strings.Join(parts, ", "), len(v.Hosts))
}

func printSessions(w io.Writer, vs []admin.SessionView) {
	fmt.Fprintln(w, "ID\tSTATE\tHOSTS\tCREATED\tREASON")
	for i := range vs {
		v := &vs[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", v.ID, v.State, progress(v), v.Created.UTC().Format(time.RFC3339), cmp.Or(v.Reason, "-"))
	}
}

// printSession prints one session, then its hosts as a table.
func printSession(w io.Writer, v *admin.SessionView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ID:\t%s\n", v.ID)
	fmt.Fprintf(tw, "State:\t%s\n", v.State)
	if v.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", v.Reason)
	}
	fmt.Fprintf(tw, "Hosts:\t%s\n", progress(v))
	fmt.Fprintf(tw, "Max hosts:\t%d\n", v.Spec.MaxHosts)
	if len(v.Spec.MaxUnavailable) > 0 {
		var b []string
		for _, k := range forewarn.GroupKinds {
			if x, ok := v.Spec.MaxUnavailable[k]; ok {
				b = append(b, k+"="+x)
			}
		}
		fmt.Fprintf(tw, "Max unavailable:\t%s\n", strings.Join(b, " "))
	}
	fmt.Fprintf(tw, "Action:\t%s\n", v.Spec.Action)
	for _, f := range []struct{ k, v string }{{"Notice", v.Spec.Notice}, {"Delay", v.Spec.Delay}, {"Reply timeout", v.Spec.ReplyTimeout}} {
		if f.v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", f.k, f.v)
		}
	}
	if len(v.Spec.Windows) > 0 {
		fmt.Fprintf(tw, "Windows:\t%s\n", strings.Join(v.Spec.Windows, "; "))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", v.Created.UTC().Format(time.RFC3339))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSTATE\tVMS\tEVENTS\tSTARTED\tREADY\tENDED\tREASON")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, h := range v.Hosts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", h.Name, h.State, h.NumVMs(), h.NumEvents(), at(h.Started), at(h.ReadyAt), at(h.Ended), cmp.Or(h.Reason, "-"))
	}
	return tw.Flush()
}
