package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/fleetfile"
)

const (
	fleetApplySynopsis  = "FILE [--dry-run] [--prune] [--json]"
	fleetExportSynopsis = ""
	vmAddSynopsis       = "NAME --ip A [--provider P] [--set KEY=VALUE ...]"
	vmSetSynopsis       = "NAME KEY=VALUE [KEY=VALUE ...]"
	vmRemoveSynopsis    = "NAME"
)

const fleetUsage = `usage: forewarn fleet <command> [arguments]

commands:
  apply     ` + fleetApplySynopsis + `
                  make the inventory what FILE (a fleet file, YAML or JSON; - for
                  stdin) says, in one change, and print what changed; --dry-run
                  only prints it; --prune also removes the VMs FILE does not name
  export          print the inventory as a fleet file that apply takes back

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
`

// runFleet runs 'forewarn fleet ...' and returns the exit code.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	switch args[0] {
	case "apply":
		return fleetApply(ctx, args[1:], stdout, stderr)
	case "export":
		return fleetExport(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, fleetUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown fleet command %q\n\n%s", args[0], fleetUsage)
	return 2
}

// fleetApply applies a fleet file and prints the changes as a table.
func fleetApply(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("fleet apply", fleetApplySynopsis)
	dryRun := c.fs.Bool("dry-run", false, "print what the file would change, and change nothing")
	prune := c.fs.Bool("prune", false, "remove the VMs and scale sets the file does not name")
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		file, err := oneArg(pos, "fleet file")
		if err != nil {
			return err
		}
		var doc []byte
		if file == "-" {
			doc, err = io.ReadAll(io.LimitReader(os.Stdin, admin.MaxFleetBytes+1))
		} else {
			doc, err = os.ReadFile(file)
		}
		if err != nil {
			return fmt.Errorf("read the fleet file: %w", err)
		}
		a, err := c.client().ApplyFleet(ctx, doc, *dryRun, *prune)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, a)
		}
		return printChanges(stdout, a)
	})
}

// printChanges writes what an apply changed as a table (CHANGE, KIND,
// NAME, KEYS), then a summary line.
func printChanges(w io.Writer, a *admin.Applied) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := 0
	row := func(change, kind, name, keys string) {
		if rows == 0 {
			fmt.Fprintln(tw, "CHANGE\tKIND\tNAME\tKEYS")
		}
		rows++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", change, kind, name, keys)
	}
	for _, d := range []struct {
		kind  string
		delta fleetfile.Delta
	}{{"vm", a.VMs}, {"scaleset", a.ScaleSets}} {
		for _, n := range d.delta.Added {
			row("add", d.kind, n, "-")
		}
		for _, ch := range d.delta.Changed {
			row("change", d.kind, ch.Name, strings.Join(ch.Keys, ","))
		}
		for _, n := range d.delta.Removed {
			row("remove", d.kind, n, "-")
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verb := "changed"
	if a.DryRun {
		verb = "would change"
	}
	_, err := fmt.Fprintf(w, "%s: %d added, %d changed, %d removed (VMs); inventory revision %d\n", verb,
		len(a.VMs.Added), len(a.VMs.Changed), len(a.VMs.Removed), a.Revision)
	return err
}

// fleetExport prints the inventory as a fleet file.
func fleetExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("fleet export", fleetExportSynopsis)
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		doc, _, err := c.client().ExportFleet(ctx)
		if err != nil {
			return err
		}
		_, err = stdout.Write(doc)
		return err
	})
}

// vmAdd registers a VM: its address, provider and other fleet file keys.
func vmAdd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm add", vmAddSynopsis)
	ip := c.fs.String("ip", "", "the `address` the VM's requests come from (required)")
	provider := c.fs.String("provider", "", "`azure`, gce or aws (default azure)")
	var sets stringsFlag
	c.fs.Var(&sets, "set", "a fleet file `KEY=VALUE` of the VM, such as availabilitySet=web; repeat for several")
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		if *ip == "" {
			return usagef("missing --ip")
		}
		def := map[string]any{"ip": *ip}
		if *provider != "" {
			def["provider"] = *provider
		}
		if err := keyValues(sets, def, false); err != nil {
			return err
		}
		b, err := json.Marshal(def)
		if err != nil {
			return err
		}
		d, err := c.client().PutVM(ctx, name, b, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s (inventory revision %d)\n", d.Name, map[bool]string{true: "added", false: "replaced"}[d.Created], d.Revision)
		return nil
	})
}

// vmSet changes some fleet file keys of a VM; KEY= sets a key back to
// its default.
func vmSet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm set", vmSetSynopsis)
	return c.run(args, stderr, func(pos []string) error {
		if len(pos) == 0 || pos[0] == "" {
			return usagef("missing VM name")
		}
		if len(pos) == 1 {
			return usagef("missing KEY=VALUE")
		}
		patch := map[string]any{}
		if err := keyValues(pos[1:], patch, true); err != nil {
			return err
		}
		b, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		d, err := c.client().PatchVM(ctx, pos[0], b, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s changed (inventory revision %d)\n", d.Name, d.Revision)
		return nil
	})
}

// vmRemoveFromInventory deregisters a VM ('forewarn vm remove').
func vmRemoveFromInventory(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("vm remove", vmRemoveSynopsis)
	return c.run(args, stderr, func(pos []string) error {
		name, err := oneArg(pos, "VM name")
		if err != nil {
			return err
		}
		d, err := c.client().RemoveVM(ctx, name, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s removed (inventory revision %d)\n", d.Name, d.Revision)
		return nil
	})
}

// keyValues puts each KEY=VALUE of kvs in m: true, false and numbers as
// such, anything else as a string; an empty VALUE is null when
// nullable (a merge patch's "back to the default").
func keyValues(kvs []string, m map[string]any, nullable bool) error {
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef("%q is not KEY=VALUE", kv)
		}
		if _, dup := m[k]; dup {
			return usagef("key %s is given twice", k)
		}
		switch {
		case v == "" && nullable:
			m[k] = nil
		case v == "true" || v == "false":
			m[k] = v == "true"
		default:
			var n json.Number
			if json.Unmarshal([]byte(v), &n) == nil && !strings.ContainsAny(v, "\"") {
				m[k] = n
			} else {
				m[k] = v
			}
		}
	}
	return nil
}
