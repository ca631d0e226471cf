package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// runAudit runs 'forewarn audit [--json]': every operator action the
// server recorded, oldest first.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("audit", "[--json]")
	asJSON := c.fs.Bool("json", false, `print {"entries":[...]} as the operator API answers it`)
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		entries, err := c.client().Audit(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"entries": entries})
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WHEN\tWHO\tACTION\tSTATUS")
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.At.UTC().Format(time.RFC3339), e.Who, e.Action, e.Status)
		}
		return tw.Flush()
	})
}
