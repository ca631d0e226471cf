package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/admin"
)

// Where the operator commands find the server: --server, else
// $FOREWARN_SERVER, else the default admin address of 'forewarn serve'.
const (
	serverEnv     = "FOREWARN_SERVER"
	tokenEnv      = "FOREWARN_TOKEN"
	defaultServer = "http://127.0.0.1:8170"
)

// requestTimeout bounds one operator API call.
const requestTimeout = 30 * time.Second

// command is one operator subcommand, such as "event create": its flags,
// which always include --server, and its synopsis for usage messages.
type command struct {
	name      string // "event create"
	synopsis  string // "--type T --vm NAME ..."
	fs        *flag.FlagSet
	server    string
	tokenFile string
}

// newCommand returns a command with a fresh flag set holding --server.
// The flag set prints nothing itself; run reports its errors.
func newCommand(name, synopsis string) *command {
	c := &command{name: name, synopsis: synopsis}
	c.fs = flag.NewFlagSet("forewarn "+name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.server, "server", "", "`URL` of the operator API (default $"+serverEnv+", else "+defaultServer+")")
	c.fs.StringVar(&c.tokenFile, "token-file", "", "`file` holding the operator API's bearer token (default $"+tokenEnv+")")
	return c
}

// run parses args, flags and positional arguments in any order, calls f
// with the positional ones, and returns the exit code: 0 on success or
// -h, 2 for a usage error, 1 for anything else, such as a refusal by the
// server or a server that cannot be reached.
func (c *command) run(args []string, stderr io.Writer, f func(pos []string) error) int {
	pos, err := parseInterspersed(c.fs, args)
	if err == nil {
		err = f(pos)
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stderr, "usage: forewarn %s %s\n\nflags:\n", c.name, c.synopsis)
		c.fs.SetOutput(stderr)
		c.fs.PrintDefaults()
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "forewarn: %s\nusage: forewarn %s %s\n", ue.msg, c.name, c.synopsis)
		return 2
	}
	fmt.Fprintf(stderr, "forewarn: %s\n", message(err))
	return 1
}

// client returns a client of the server the command names.
func (c *command) client() *admin.Client {
	url := c.server
	if url == "" {
		url = os.Getenv(serverEnv)
	}
	if url == "" {
		url = defaultServer
	}
	cl := admin.NewClient(url, &http.Client{Timeout: requestTimeout})
	cl.Token = os.Getenv(tokenEnv)
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			// The request then goes without a token and the server's
			// refusal names the problem; say which file failed too.
			fmt.Fprintf(os.Stderr, "forewarn: read token file: %v\n", err)
		}
		cl.Token = strings.TrimSpace(string(b))
	}
	return cl
}

// message returns the text to show for err: the message of a forewarn
// error, which the server wrote for the operator, or err's own text.
func message(err error) string {
	var fe *forewarn.Error
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parseInterspersed parses args with fs, allowing flags after positional
// arguments ("approve ID --server URL"), which flag.FlagSet.Parse alone
// does not. Everything after "--" is positional. Flag errors are usage
// errors; -h is flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneArg returns the single positional argument, named what in errors.
func oneArg(pos []string, what string) (string, error) {
	switch {
	case len(pos) == 0 || pos[0] == "":
		return "", usagef("missing %s", what)
	case len(pos) > 1:
		return "", usagef("unexpected argument %q", pos[1])
	}
	return pos[0], nil
}

// noArgs refuses positional arguments.
func noArgs(pos []string) error {
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

// listCommand is an operator command that prints a list the server
// answers: as a table, or with --json as the operator API answers it,
// {"KEY":[...]}. It takes no argument.
type listCommand[T any] struct {
	name, synopsis string // as newCommand takes them
	// key is the list's key in the API's answer.
	key string
	// fetch asks the server for the list.
	fetch func(*admin.Client, context.Context) ([]T, error)
	// table writes the items, its header first, cells separated by tabs.
	table func(w io.Writer, items []T)
}

// run runs the command with args and returns the exit code, as
// command.run does.
func (l listCommand[T]) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand(l.name, l.synopsis)
	asJSON := c.fs.Bool("json", false, `print {"`+l.key+`":[...]} as the operator API answers it`)
	return c.run(args, stderr, func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		items, err := l.fetch(c.client(), ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{l.key: items})
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		l.table(tw, items)
		return tw.Flush()
	})
}

// durationFlag is a flag.Value holding a non-negative duration and
// whether it was set.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 15m or 90s")
	}
	if d < 0 {
		return errors.New("want a duration that is not negative")
	}
	f.d, f.set = d, true
	return nil
}

// intFlag is a flag.Value holding an integer and whether it was set.
type intFlag struct {
	n   int
	set bool
}

func (f *intFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number of seconds")
	}
	f.n, f.set = n, true
	return nil
}

// stringsFlag is a repeatable flag.Value collecting its values.
type stringsFlag []string

func (f *stringsFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(*f, ",")
}

func (f *stringsFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}
