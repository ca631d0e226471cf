package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
	"github.com/forewarn/forewarn/engine"
)

const (
	maintenanceStartSynopsis = "--scope NAME --type Freeze|Reboot|Redeploy [--notice D] [--lasts D]"
	maintenanceListSynopsis  = "[--json]"
)

const maintenanceUsage = `usage: forewarn maintenance <command> [arguments]

commands:
  start     ` + maintenanceStartSynopsis + `
            raise a Platform maintenance wave over an availability set,
            cloud service or scale set: one event per update domain, in
            ascending order, each once the previous one has ended
  list      ` + maintenanceListSynopsis + `
            list the waves and the progress of each update domain

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
Run 'forewarn maintenance <command> -h' for a command's flags.
`

// runMaintenance runs 'forewarn maintenance ...' and returns the exit
// code.
func runMaintenance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, maintenanceUsage)
		return 2
	}
	switch args[0] {
	case "start":
		return maintenanceStart(ctx, args[1:], stdout, stderr)
	case "list":
		return maintenanceList(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, maintenanceUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown maintenance command %q\n\n%s", args[0], maintenanceUsage)
	return 2
}

// maintenanceStart starts a wave and prints its ID alone, for scripts.
func maintenanceStart(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("maintenance start", maintenanceStartSynopsis)
	var (
		scope, typ    string
		notice, lasts durationFlag
	)
	c.fs.StringVar(&scope, "scope", "", "`name` of an availability set, cloud service or scale set (required)")
	c.fs.StringVar(&typ, "type", "", "event `type`: Freeze, Reboot or Redeploy (required)")
	c.fs.Var(&notice, "notice", "`duration` of each update domain's notice (default the type's minimum)")
	c.fs.Var(&lasts, "lasts", "`duration` each update domain's event stays Started (default per type)")
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if scope == "" {
			return usagef("missing --scope")
		}
		if typ == "" {
			return usagef("missing --type")
		}
		t, err := forewarn.ParseEventType(typ)
		if err != nil || (t != forewarn.Freeze && t != forewarn.Reboot && t != forewarn.Redeploy) {
			return usagef("a maintenance wave is Freeze, Reboot or Redeploy, not %q", typ)
		}
		req := admin.WaveRequest{Scope: scope, Type: string(t)}
		if notice.set {
			req.Notice = notice.d.String()
		}
		if lasts.set {
			req.Lasts = lasts.d.String()
		}
		w, err := c.client().StartWave(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, w.ID)
		return nil
	})
}

// maintenanceList prints every wave as a table with one row per update
// domain, or as the API's JSON. The wave's own columns are shown on its
// first row only, so each wave reads as one block.
func maintenanceList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[*engine.Wave]{name: "maintenance list", synopsis: maintenanceListSynopsis, key: "waves", fetch: (*admin.Client).Waves,
		table: func(tw io.Writer, waves []*engine.Wave) {
			fmt.Fprintln(tw, "WAVE\tSCOPE\tTYPE\tWAVE STATUS\tUPDATE DOMAIN\tEVENT\tSTATUS\tVMS")
			for _, w := range waves {
				wave := []string{w.ID, w.Scope, string(w.Type), w.Status}
				for _, d := range w.Domains {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", strings.Join(wave, "\t"),
						strconv.Itoa(d.UpdateDomain), d.Event, d.Status, strings.Join(d.VMs, ","))
					wave = []string{"", "", "", ""}
				}
			}
		}}.run(ctx, args, stdout, stderr)
}
