package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
)

const (
	hostListSynopsis = "[--json]"
	hostShowSynopsis = "NAME [--json]"
	hostWaitSynopsis = "HOST --state Notifying|Ready|InMaintenance|Done|Failed [--timeout D] [--json]"
	hostDoneSynopsis = "HOST [--json]"
	hostFailSynopsis = "HOST --reason TEXT [--json]"
)

const hostUsage = `usage: forewarn host <command> [arguments]

commands:
  list  ` + hostListSynopsis + `
        list the hosts the fleet's VMs name (their host key), each with its VMs
  show  ` + hostShowSynopsis + `
        one host and every one of its VMs
  wait  ` + hostWaitSynopsis + `
        wait until the host reaches the state in its maintenance session
        (exit 0), fails or is left out of it (exit 1 with the reason)
  done  ` + hostDoneSynopsis + `
        the host's maintenance is done: its VMs' events complete and the
        session goes on to the next host
  fail  ` + hostFailSynopsis + `
        the host's maintenance failed: its session pauses

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
`

// runHost runs 'forewarn host ...' and returns the exit code.
func runHost(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, hostUsage)
		return 2
	}
	switch args[0] {
	case "list":
		return hostList(ctx, args[1:], stdout, stderr)
	case "show":
		return hostShow(ctx, args[1:], stdout, stderr)
	case "wait":
		return hostWait(ctx, args[1:], stdout, stderr)
	case "done", "fail":
		return hostEnd(ctx, args[0], args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, hostUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown host command %q\n\n%s", args[0], hostUsage)
	return 2
}

// hostListNames is how many of a host's VMs host list names before it
// counts the rest.
const hostListNames = 4

// hostList prints the hosts as a table, or as the API's JSON.
func hostList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[engine.HostInfo]{name: "host list", synopsis: hostListSynopsis, key: "hosts", fetch: (*admin.Client).Hosts,
		table: func(w io.Writer, hosts []engine.HostInfo) {
			fmt.Fprintln(w, "HOST\tVMS\tSTATE\tSESSION\tNAMES")
			for _, h := range hosts {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", h.Name, len(h.VMs), cmp.Or(string(h.State), "-"), cmp.Or(h.Session, "-"), abbreviate(h.VMs, hostListNames))
			}
		}}.run(ctx, args, stdout, stderr)
}

// abbreviate returns the first n of names, comma-separated, and how
// many more there are: "a,b,c,d and 96 more".
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ",")
	}
	return strings.Join(names[:n], ",") + " and " + strconv.Itoa(len(names)-n) + " more"
}

// hostShow prints one host and every one of its VMs, a line each, or
// the API's JSON.
func hostShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("host show", hostShowSynopsis)
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "host name")
		if err != nil {
			return err
		}
		h, err := c.client().Host(ctx, name)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, h)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "Name:\t%s\n", h.Name)
		fmt.Fprintf(tw, "VMs:\t%d\n", len(h.VMs))
		if h.Session != "" {
			fmt.Fprintf(tw, "State:\t%s (session %s)\n", h.State, h.Session)
		}
		if h.Reason != "" {
			fmt.Fprintf(tw, "Reason:\t%s\n", h.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		for _, vm := range h.VMs {
			fmt.Fprintln(stdout, vm)
		}
		return nil
	})
}

// hostWait waits until a host reaches a state, asking the server again
// until --timeout runs out.
func hostWait(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("host wait", hostWaitSynopsis)
	state := c.fs.String("state", "Ready", "the state to wait for (a later one counts: a host InMaintenance has been Ready)")
	timeout := c.fs.Duration("timeout", 0, "give up after this long, exit 1 (default: wait for ever)")
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		host, err := oneArg(pos, "host name")
		if err != nil {
			return err
		}
		if *timeout < 0 {
			return usagef("--timeout %s is negative", *timeout)
		}
		var end time.Time
		if *timeout > 0 {
			end = time.Now().Add(*timeout)
		}
		cl := c.client()
		for {
			wait := requestTimeout - 5*time.Second
			if !end.IsZero() {
				wait = min(wait, time.Until(end))
			}
			if wait <= 0 {
				return fmt.Errorf("host %s did not reach %s within %s", host, *state, *timeout)
			}
			h, err := cl.WaitHost(ctx, host, *state, wait.Round(time.Millisecond))
			if forewarn.ErrorCode(err) == forewarn.EUNAVAILABLE && ctx.Err() == nil {
				continue // the server's wait ran out, or it is briefly away: ask again
			}
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(stdout, h)
			}
			fmt.Fprintf(stdout, "host %s is %s in session %s\n", h.Name, h.State, h.Session)
			return nil
		}
	})
}

// hostEnd runs host done and host fail.
func hostEnd(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) int {
	synopsis := hostDoneSynopsis
	if verb == "fail" {
		synopsis = hostFailSynopsis
	}
	c := newCommand("host "+verb, synopsis)
	reason := c.fs.String("reason", "", "why the maintenance failed")
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		host, err := oneArg(pos, "host name")
		if err != nil {
			return err
		}
		cl := c.client()
		switch {
		case verb == "fail" && strings.TrimSpace(*reason) == "":
			return usagef("give --reason: why the maintenance failed")
		case verb == "done" && *reason != "":
			return usagef("--reason is for host fail")
		}
		var h any
		if verb == "done" {
			h, err = cl.HostDone(ctx, host)
		} else {
			h, err = cl.HostFail(ctx, host, *reason)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, h)
		}
		fmt.Fprintf(stdout, "host %s: %s\n", host, map[string]string{"done": "Done", "fail": "Failed"}[verb])
		return nil
	})
}
