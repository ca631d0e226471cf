package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/forewarn/forewarn"
)

const (
	vmListSynopsis   = "[--json]"
	vmActionSynopsis = "NAME [--notice D]"
)

const vmUsage = `usage: forewarn vm <command> [arguments]

commands:
  list      ` + vmListSynopsis + `
  restart   ` + vmActionSynopsis + `    raise a User Reboot of the VM
  redeploy  ` + vmActionSynopsis + `    raise a User Redeploy of the VM
  evict     NAME                 preempt a Spot or preemptible VM

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
Run 'forewarn vm <command> -h' for a command's flags.
`

// runVM runs 'forewarn vm ...' and returns the exit code.
func runVM(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, vmUsage)
		return 2
	}
	switch args[0] {
	case "list":
		return vmList(ctx, args[1:], stdout, stderr)
	case "restart", "redeploy":
		return vmAction(ctx, args[0], args[1:], stdout, stderr)
	case "evict":
		return vmEvict(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, vmUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown vm command %q\n\n%s", args[0], vmUsage)
	return 2
}

// vmList prints the fleet as a table, or as the API's JSON.
func vmList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm list", vmListSynopsis)
	asJSON := c.fs.Bool("json", false, `print {"vms":[...]} as the operator API answers it`)
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		vms, err := c.client().VMs(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"vms": vms})
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tIP\tPROVIDER\tSTATE\tAVAILABILITY SET\tUPDATE DOMAIN\tINCARNATION\tEVENTS")
		for _, vm := range vms {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
				vm.Name, dash(vm.IP.String(), vm.IP.IsValid()), vm.Provider, vm.State,
				dash(vm.AvailabilitySet, vm.AvailabilitySet != ""), vm.UpdateDomain, vm.Incarnation,
				dash(strings.Join(vm.Events, ","), len(vm.Events) > 0))
		}
		return tw.Flush()
	})
}

// dash returns s when ok, and "-" otherwise.
func dash(s string, ok bool) string {
	if !ok {
		return "-"
	}
	return s
}

// vmAction raises a User Reboot (restart) or Redeploy of one VM and
// prints the new event's ID alone, for scripts.
func vmAction(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm "+action, vmActionSynopsis)
	var notice durationFlag
	c.fs.Var(&notice, "notice", "`duration` from now to NotBefore (default the type's minimum)")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		cl := c.client()
		do := cl.Restart
		if action == "redeploy" {
			do = cl.Redeploy
		}
		var ev *forewarn.Event
		if ev, err = do(ctx, name, notice.d); err != nil {
			return err
		}
		fmt.Fprintln(stdout, ev.ID)
		return nil
	})
}

// vmEvict preempts a Spot or preemptible VM and prints the Preempt
// event's ID alone.
func vmEvict(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm evict", "NAME")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		ev, err := c.client().Evict(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ev.ID)
		return nil
	})
}
