package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
)

const (
	vmListSynopsis   = "[--json]"
	vmActionSynopsis = "NAME [--notice D]"
	vmNameSynopsis   = "NAME"
	vmEvictSynopsis  = "NAME [--notice D] [--lasts D]"
	vmDeleteSynopsis = "NAME [--lasts D]"
)

const vmUsage = `usage: forewarn vm <command> [arguments]

commands:
  list      ` + vmListSynopsis + `
  show      NAME [--json]        the VM, what it sees now and its recent requests
  restart   ` + vmActionSynopsis + `    raise a User Reboot of the VM
  redeploy  ` + vmActionSynopsis + `    raise a User Redeploy of the VM
  evict     ` + vmEvictSynopsis + `
                                 preempt a Spot or preemptible VM (--notice: EC2 only)
  start     NAME                 start again a GCE or EC2 VM that a preemption stopped
  delete    ` + vmDeleteSynopsis + `
                                 delete a scale set VM or scale in an Auto Scaling
                                 member
  degrade   ` + vmActionSynopsis + `    raise the Platform Redeploy of a predicted hardware
                                 failure (default notice 7 days)
  add       ` + vmAddSynopsis + `
                                 register a VM in the inventory (KEY: a fleet file key)
  set       ` + vmSetSynopsis + `
                                 change fleet file keys of a VM (KEY= for the default)
  remove    ` + vmRemoveSynopsis + `                 deregister a VM: no Terminate, no notice; its
                                 address is refused at once

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
	case "add":
		return vmAdd(ctx, args[1:], stdout, stderr)
	case "set":
		return vmSet(ctx, args[1:], stdout, stderr)
	case "remove":
		return vmRemoveFromInventory(ctx, args[1:], stdout, stderr)
	case "show":
		return vmShow(ctx, args[1:], stdout, stderr)
	case "restart", "redeploy", "degrade":
		return vmAction(ctx, args[0], args[1:], stdout, stderr)
	case "evict", "delete":
		return vmRemove(ctx, args[0], args[1:], stdout, stderr)
	case "start":
		return vmStart(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, vmUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown vm command %q\n\n%s", args[0], vmUsage)
	return 2
}

// vmList prints the fleet as a table, or as the API's JSON.
func vmList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[engine.VMInfo]{name: "vm list", synopsis: vmListSynopsis, key: "vms", fetch: (*admin.Client).VMs,
		table: func(tw io.Writer, vms []engine.VMInfo) {
			// The NETWORK and HOST columns show once a VM has one: the
			// table of a fleet on one network and of no host stays as it
			// was.
			cols := optionalColumnsOf(vms, func(vm engine.VMInfo) (string, string) { return vm.Network, vm.Host })
			fmt.Fprintln(tw, "NAME\tIP\t"+cols.header()+"PROVIDER\tSTATE\tENABLED\tLAST SEEN\tSCOPE\tZONE\tUD\tSPOT\tINCARNATION\tEVENTS")
			for _, vm := range vms {
				fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
					vm.Name, dash(vm.IP.String(), vm.IP.IsValid()), cols.cells(vm.Network, vm.Host), vm.Provider, vm.StateText(),
					yesNo(vm.Enabled), dash(vm.LastSeen.UTC().Format(time.RFC3339), !vm.LastSeen.IsZero()),
					scope(vm), dash(vm.Zone, vm.Zone != ""),
					dash(strconv.Itoa(vm.UpdateDomain), vm.Provider == forewarn.Azure), spot(vm),
					vm.Incarnation, dash(strings.Join(vm.Events, ","), len(vm.Events) > 0))
			}
		}}.run(ctx, args, stdout, stderr)
}

// optionalColumns says which of the NETWORK and HOST columns of vm list
// and of the report's VM table are shown: each once a VM has a value.
type optionalColumns struct{ network, host bool }

// optionalColumnsOf returns the optional columns of a table of items,
// whose network and host of returns.
func optionalColumnsOf[T any](items []T, of func(T) (network, host string)) optionalColumns {
	var c optionalColumns
	for _, it := range items {
		n, h := of(it)
		c.network, c.host = c.network || n != "", c.host || h != ""
	}
	return c
}

// header returns the headers of the columns shown, each with its tab.
func (c optionalColumns) header() string {
	return c.cells("NETWORK", "HOST")
}

// cells returns a row's cells of the columns shown, each with its tab:
// network and host, "-" for none.
func (c optionalColumns) cells(network, host string) string {
	var s string
	if c.network {
		s += dash(network, network != "") + "\t"
	}
	if c.host {
		s += dash(host, host != "") + "\t"
	}
	return s
}

// scope names the group whose events vm sees besides its own: its
// availability set, cloud service, or scale set (with the placement
// group as "scaleSet:placementGroup"); "-" for a standalone VM.
func scope(vm engine.VMInfo) string {
	switch {
	case vm.AvailabilitySet != "":
		return vm.AvailabilitySet
	case vm.CloudService != "":
		return vm.CloudService
	case vm.ScaleSet != "" && vm.PlacementGroup != "":
		return vm.ScaleSet + ":" + vm.PlacementGroup
	case vm.ScaleSet != "":
		return vm.ScaleSet
	}
	return "-"
}

// spot says whether vm can be evicted: "yes" for an Azure Spot or a
// Compute Engine SPOT VM, "preemptible" for a Compute Engine VM with the
// legacy preemptible flag, "-" otherwise.
func spot(vm engine.VMInfo) string {
	switch {
	case vm.Spot:
		return "yes"
	case vm.Preemptible:
		return "preemptible"
	}
	return "-"
}

// yesNo returns "yes" when b, and "no" otherwise.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// dash returns s when ok, and "-" otherwise.
func dash(s string, ok bool) string {
	if !ok {
		return "-"
	}
	return s
}

// vmAction raises a User Reboot (restart) or Redeploy of one VM, or the
// Platform Redeploy of a predicted hardware failure (degrade), and prints
// the new event's ID alone, for scripts.
func vmAction(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm "+action, vmActionSynopsis)
	var notice durationFlag
	def := "the type's minimum"
	if action == "degrade" {
		def = "7 days"
	}
	c.fs.Var(&notice, "notice", "`duration` from now to NotBefore (default "+def+")")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		cl := c.client()
		do := map[string]func(context.Context, string, time.Duration) (*forewarn.Event, error){
			"restart":  cl.Restart,
			"redeploy": cl.Redeploy,
			"degrade":  cl.Degrade,
		}[action]
		var ev *forewarn.Event
		if ev, err = do(ctx, name, notice.d); err != nil {
			return err
		}
		fmt.Fprintln(stdout, ev.ID)
		return nil
	})
}

// vmRemove preempts a Spot or preemptible VM (evict) or deletes a scale
// set VM (delete), and prints the Preempt or Terminate event's ID alone.
func vmRemove(ctx context.Context, action string, args []string, stdout, stderr io.Writer) int {
	synopsis := vmEvictSynopsis
	if action == "delete" {
		synopsis = vmDeleteSynopsis
	}
	c := newCommand("vm "+action, synopsis)
	var notice, lasts durationFlag
	if action == "evict" {
		c.fs.Var(&notice, "notice", "`duration` from now to an EC2 Spot VM's interruption; its notice comes 2m before (default 2m)")
		c.fs.Var(&lasts, "lasts", "`duration` the VM takes to stop or terminate once preempted (default 30s on GCE and EC2)")
	} else {
		c.fs.Var(&lasts, "lasts", "`duration` the Terminate stays Started before the VM is gone (default per type; 2m for EC2)")
	}
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		cl := c.client()
		var ev *forewarn.Event
		if action == "delete" {
			ev, err = cl.DeleteWith(ctx, name, lasts.d)
		} else {
			ev, err = cl.EvictWith(ctx, name, notice.d, lasts.d)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ev.ID)
		return nil
	})
}

// vmStart starts again a Compute Engine VM that a preemption stopped, and
// prints its name and new state.
func vmStart(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm start", vmNameSynopsis)
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		info, err := c.client().StartVM(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s\n", info.Name, info.State)
		return nil
	})
}

// vmShow prints one VM, the documents it sees now and its recent
// metadata requests, or the API's JSON.
func vmShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm show", "NAME [--json]")
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		if len(pos) != 1 {
			return usagef("want one VM name")
		}
		d, err := c.client().VM(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, d)
		}
		vm := d.VM
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "Name:\t%s\n", vm.Name)
		fmt.Fprintf(tw, "IP:\t%s\n", dash(vm.IP.String(), vm.IP.IsValid()))
		if vm.Network != "" {
			fmt.Fprintf(tw, "Network:\t%s\n", vm.Network)
		}
		if vm.Host != "" {
			fmt.Fprintf(tw, "Host:\t%s\n", vm.Host)
		}
		fmt.Fprintf(tw, "Provider:\t%s\n", vm.Provider)
		fmt.Fprintf(tw, "State:\t%s\n", vm.StateText())
		fmt.Fprintf(tw, "Spot:\t%s\n", spot(vm))
		fmt.Fprintf(tw, "Enabled:\t%s\n", yesNo(vm.Enabled))
		fmt.Fprintf(tw, "Last seen:\t%s\n", dash(vm.LastSeen.UTC().Format(time.RFC3339), !vm.LastSeen.IsZero()))
		fmt.Fprintf(tw, "Scope:\t%s\n", scope(vm))
		fmt.Fprintf(tw, "Incarnation:\t%d\n", vm.Incarnation)
		fmt.Fprintf(tw, "Events:\t%s\n", dash(strings.Join(vm.Events, ","), len(vm.Events) > 0))
		if err := tw.Flush(); err != nil {
			return err
		}
		apis := make([]string, 0, len(d.Documents))
		for api := range d.Documents {
			apis = append(apis, api)
		}
		sort.Strings(apis)
		for _, api := range apis {
			paths := make([]string, 0, len(d.Documents[api]))
			for p := range d.Documents[api] {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				fmt.Fprintf(stdout, "\n%s %s:\n%s\n", api, p, d.Documents[api][p])
			}
		}
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tAPI\tMETHOD\tPATH\tAPI-VERSION\tSTATUS\tLATENCY\tLONG-POLL\tAPPROVED")
		for _, e := range d.History {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
				e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), e.API, e.Method, e.Path,
				dash(e.APIVersion, e.APIVersion != ""), e.Status, e.Latency.Round(time.Microsecond),
				dash(e.PollEnd, e.LongPoll), dash(strings.Join(e.Approved, ","), len(e.Approved) > 0))
		}
		return tw.Flush()
	})
}
