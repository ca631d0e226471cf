// Command forewarn is the Forewarn server, its operator CLI, its node
// agent and its load harness.
//
//	forewarn serve [flags]            run the metadata and operator APIs
//	forewarn relay [flags]            run a host's metadata relay
//	forewarn event create|list|approve|start|complete|cancel ...
//	forewarn vm list|restart|redeploy|evict|start|delete|degrade ...
//	forewarn maintenance start|list ...
//	forewarn scaleset list|set ...
//	forewarn host list|show|wait|done|fail ...
//	forewarn session create|list|show|pause|resume|cancel ...
//	forewarn agent [flags]            run the node agent on a VM
//	forewarn audit [--json]           show recorded operator actions
//	forewarn report [--vm NAME]       what each VM's client did, against the seeds
//	forewarn scenario run FILE        play a scenario against a server, check its clients
//	forewarn bench poll|fanout|engine the load harness
//
// Run a subcommand with -h for its flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: forewarn <command> [arguments]

commands:
  serve        run the metadata API and the operator API
  relay        run a host's metadata relay: VMs' requests to the servers, with their network
  event        create, list, approve, start, complete or cancel events
  vm           list VMs; restart, redeploy, evict, start, delete or degrade a VM;
               add, set or remove a VM of the inventory
  fleet        apply a fleet file to the inventory, or export it
  maintenance  start or list platform maintenance waves over a scope
  scaleset     list scale sets; change a scale set's Terminate timeout or notifications
  host         list the hosts (hypervisors) the VMs name, or show one with its VMs;
               wait for a host in a maintenance session, say it is done or failed
  session      maintenance sessions: take hosts down one at a time within budgets
  agent        run the node agent on a VM: watch its events, run handlers, approve
  audit        show the operator actions the server recorded
  report       what each VM's client did against what the seeds ask of it
  scenario     play a scenario file against a server and check its clients (CI)
  cluster      show the replicas sharing the store, the leader and their lag
  bench        the load harness: polling load, long-poll fan-out, engine scale

Run 'forewarn <command> -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "relay":
		return runRelay(ctx, args[1:], stdout, stderr)
	case "event":
		return runEvent(ctx, args[1:], stdout, stderr)
	case "vm":
		return runVM(ctx, args[1:], stdout, stderr)
	case "fleet":
		return runFleet(ctx, args[1:], stdout, stderr)
	case "maintenance":
		return runMaintenance(ctx, args[1:], stdout, stderr)
	case "scaleset":
		return runScaleSet(ctx, args[1:], stdout, stderr)
	case "host":
		return runHost(ctx, args[1:], stdout, stderr)
	case "session":
		return runSession(ctx, args[1:], stdout, stderr)
	case "agent":
		return runAgent(ctx, args[1:], stdout, stderr)
	case "audit":
		return runAudit(ctx, args[1:], stdout, stderr)
	case "report":
		return runReport(ctx, args[1:], stdout, stderr)
	case "scenario":
		return runScenario(ctx, args[1:], stdout, stderr)
	case "cluster":
		return runCluster(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "bench-ceiling":
		return runBenchCeiling(ctx, args[1:], stdout, stderr)
	case "bench-hop":
		return runBenchHop(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "forewarn: unknown command %q\n\n%s", args[0], usage)
	return 2
}
