package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn/report"
)

const reportSynopsis = "[--vm NAME] [--json]"

// runReport prints the client-behaviour report: per VM, how its client
// called and what it did that the seeds advise against, then the events,
// who saw them and their findings.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("report", reportSynopsis)
	vm := c.fs.String("vm", "", "report only the VM with this `name`, and its events")
	asJSON := c.fs.Bool("json", false, "print the operator API's JSON")
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		rep, err := c.client().Report(ctx, *vm)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, rep)
		}
		return printReport(stdout, rep)
	})
}

// printReport writes rep as three tables: the VMs, their findings in
// full, and the events.
func printReport(w io.Writer, rep *report.Report) error {
	// The NETWORK and HOST columns show once a VM has one, as in vm list.
	cols := optionalColumnsOf(rep.VMs, func(v report.VM) (string, string) { return v.Network, v.Host })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\t"+cols.header()+"API\tREQUESTS\tFIRST CALL\tLAST CALL\tLONGEST GAP\tWHILE PENDING\tEXPECTED\tAPI-VERSIONS\tFINDINGS")
	for _, v := range rep.VMs {
		var vs, fs []string
		for _, vc := range v.APIVersions {
			vs = append(vs, fmt.Sprintf("%s×%d", vc.Version, vc.Requests))
		}
		for _, f := range v.Findings {
			fs = append(fs, fmt.Sprintf("%s×%d", f.Kind, f.Count))
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, cols.cells(v.Network, v.Host), v.Provider, v.Requests,
			clock(v.FirstCall), clock(v.LastCall), seconds(v.LongestGapSeconds), seconds(v.LongestPendingGapSeconds),
			seconds(v.ExpectedIntervalSeconds), dash(strings.Join(vs, ","), len(vs) > 0), dash(strings.Join(fs, ", "), len(fs) > 0))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var found bool
	for _, v := range rep.VMs {
		for _, f := range v.Findings {
			if !found {
				fmt.Fprintln(w)
				tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "VM\tFINDING\tCOUNT\tDETAIL")
				found = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", v.Name, f.Kind, f.Count, f.Detail)
		}
	}
	if found {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Events) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tTYPE\tSTATUS\tRESOURCES\tSEEN BY\tSEEN AFTER\tAPPROVED BY\tFINDINGS")
	for _, e := range rep.Events {
		var by, fs []string
		for _, a := range e.Approvals {
			by = append(by, a.By)
		}
		for _, f := range e.Findings {
			fs = append(fs, f.Kind+": "+f.Detail)
		}
		after := "-"
		if !e.SeenAt.IsZero() && !e.VisibleSince.IsZero() {
			after = e.SeenAt.Sub(e.VisibleSince).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Type, e.Status, strings.Join(e.Resources, ","),
			dash(e.SeenBy, e.SeenBy != ""), after, dash(strings.Join(by, ","), len(by) > 0), dash(strings.Join(fs, "; "), len(fs) > 0))
	}
	return tw.Flush()
}

// clock shows t to the millisecond in UTC, "-" for the zero time.
func clock(t time.Time) string {
	return dash(t.UTC().Format("15:04:05.000"), !t.IsZero())
}

// seconds shows s seconds as a duration, "-" for 0.
func seconds(s float64) string {
	return dash(time.Duration(s*float64(time.Second)).Round(time.Millisecond).String(), s > 0)
}
