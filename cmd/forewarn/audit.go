package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forewarn/forewarn/admin"
)

// runAudit runs 'forewarn audit [--json]': every operator action the
// server recorded, oldest first.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return listCommand[admin.AuditEntry]{name: "audit", synopsis: "[--json]", key: "entries", fetch: (*admin.Client).Audit,
		table: func(tw io.Writer, entries []admin.AuditEntry) {
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
		}}.run(ctx, args, stdout, stderr)
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
