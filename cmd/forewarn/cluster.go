package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

const clusterStatusSynopsis = "[--json]"

const clusterUsage = `usage: forewarn cluster <command> [arguments]

commands:
  status    ` + clusterStatusSynopsis + `    the replicas sharing the server's store, the leader,
                          and each replica's revision and lag

Every command takes --server URL (default $` + serverEnv + `, else ` + defaultServer + `).
`

// runCluster runs 'forewarn cluster ...' and returns the exit code.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, clusterUsage)
		return 2
	}
	switch args[0] {
	case "status":
		return clusterStatus(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, clusterUsage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown cluster command %q\n\n%s", args[0], clusterUsage)
	return 2
}

// clusterStatus prints the replicas as a table, or as the API's JSON.
func clusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("cluster status", clusterStatusSynopsis)
	asJSON := c.fs.Bool("json", false, "print the operator API's answer as it is")
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		st, err := c.client().Cluster(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, st)
		}
		fmt.Fprintf(stdout, "store revision %d, leader %s\n", st.Revision, dash(st.Leader, st.Leader != ""))
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tLEADER\tREVISION\tLAG\tADDRESS\tSTARTED\tLAST REPORT")
		for _, r := range st.Replicas {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Name, yesNo(r.Name == st.Leader), r.Revision,
				max(st.Revision-r.Revision, 0), dash(r.Address, r.Address != ""),
				dash(r.Started.UTC().Format(time.RFC3339), !r.Started.IsZero()),
				dash(r.Updated.UTC().Format(time.RFC3339Nano), !r.Updated.IsZero()))
		}
		return tw.Flush()
	})
}
