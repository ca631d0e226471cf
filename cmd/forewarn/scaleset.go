package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
)

const (
	scaleSetListSynopsis = "[--json]"
	scaleSetSetSynopsis  = "NAME [--terminate-timeout D] [--terminate-notifications on|off]"
)

const scaleSetUsage = `usage: forewarn scaleset <command> [arguments]

commands:
  list  ` + scaleSetListSynopsis + `
        show each scale set's Terminate timeout and notifications in force
  set   ` + scaleSetSetSynopsis + `
        change them at run time: D is PT5M..PT15M or 5m..15m. The change is
        stored, applies to new deletes only, and overrides the fleet file's
        settings for that scale set from then on, restarts included

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
`

// runScaleSet runs 'forewarn scaleset ...' and returns the exit code.
func runScaleSet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, scaleSetUsage)
		return 2
	}
	switch args[0] {
	case "list":
		return scaleSetList(ctx, args[1:], stdout, stderr)
	case "set":
		return scaleSetSet(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, scaleSetUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown scaleset command %q\n\n%s", args[0], scaleSetUsage)
	return 2
}

// scaleSetList prints the scale sets as a table, or as the API's JSON.
func scaleSetList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[engine.ScaleSetInfo]{name: "scaleset list", synopsis: scaleSetListSynopsis, key: "scaleSets", fetch: (*admin.Client).ScaleSets,
		table: func(w io.Writer, sets []engine.ScaleSetInfo) {
			fmt.Fprintln(w, "NAME\tVMS\tTERMINATE TIMEOUT\tTERMINATE NOTIFICATIONS\tSET BY")
			for _, s := range sets {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", s.Name, s.VMs, s.TimeoutISO(),
					onOff(s.TerminateNotifications), s.Source)
			}
		}}.run(ctx, args, stdout, stderr)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// scaleSetSet changes a scale set's Terminate settings and prints them.
func scaleSetSet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("scaleset set", scaleSetSetSynopsis)
	timeout := c.fs.String("terminate-timeout", "", "the notBeforeTimeout of new deletes: `D`, PT5M..PT15M or 5m..15m")
	notifications := c.fs.String("terminate-notifications", "", "whether a delete raises a Terminate event: `on|off`")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "scale set name")
		if err != nil {
			return err
		}
		var n *bool
		switch strings.ToLower(*notifications) {
		case "":
		case "on", "true":
			on := true
			n = &on
		case "off", "false":
			off := false
			n = &off
		default:
			return usagef("--terminate-notifications must be on or off, not %q", *notifications)
		}
		if *timeout == "" && n == nil {
			return usagef("nothing to change: give --terminate-timeout, --terminate-notifications, or both")
		}
		s, err := c.client().SetScaleSet(ctx, name, *timeout, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s terminateNotBeforeTimeout %s, terminate notifications %s\n",
			s.Name, s.TimeoutISO(), onOff(s.TerminateNotifications))
		return nil
	})
}
