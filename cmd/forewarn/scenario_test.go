package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScenarioFileErrors checks that a bad scenario file exits 2 with
// package scenario's message, naming the file, the line and the key,
// before anything runs (package scenario tests every message), and so do
// usage errors.
func TestScenarioFileErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"bad offset", "fleet:\n  vms:\n    - {name: web_0, ip: 127.0.0.2}\nsteps:\n  - at: soon\n    approve: f1\n",
			`:5: steps[0].at: "soon": want a duration such as 15m or 90s`},
		{"bad fleet entry", "fleet:\n  vms:\n    - {name: web_1, ip: nope}\nsteps:\n  - create: {type: Freeze, vm: web_1}\n",
			`:3: fleet: vms[0] (web_1): ip "nope" is not an IP address (or any)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "s.yaml")
			if err := os.WriteFile(file, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"scenario", "run", file, "--serve"}, &out, &errOut)
			if want := "forewarn: " + file + c.want + "\n"; code != 2 || errOut.String() != want {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), want)
			}
			if out.Len() != 0 {
				t.Errorf("a bad file ran: %s", out.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"scenario", "run", "x.yaml", "--serve", "--server", "http://127.0.0.1:1"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "give --serve or --server, not both") {
		t.Errorf("--serve and --server: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"scenario", "run", "missing.yaml"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "missing.yaml") {
		t.Errorf("missing file: exit %d, %q", code, errOut.String())
	}
}
