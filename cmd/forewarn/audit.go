package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
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
			action := printable(e.Action)
			if e.Count > 0 {
				action = fmt.Sprintf("%d more refused, the last: %s", e.Count, action)
			}
			status := "?" // the outcome was never recorded
			if e.Status != 0 {
				status = strconv.Itoa(e.Status)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), printable(e.Who), action, status)
		}
		return tw.Flush()
	})
}

// printable returns s as it is when it holds only printable characters,
// and Go-quoted otherwise ("POST /v1/events/\n2026-..."), so that no
// recorded field can forge a line, move the cursor or reorder the text
// on a terminal: control characters, bidirectional overrides and other
// format characters, separators other than the ASCII space, and bytes
// that are not UTF-8 are escaped. A value with a quote or a backslash is
// quoted too, so an escaped value cannot be mistaken for a raw one.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return !strconv.IsPrint(r) || r == '"' || r == '\\'
	}) {
		return s
	}
	return strconv.Quote(s)
}
