package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorToken runs the real binary with --admin-token-file: the
// token is generated with mode 0600, the CLI without it is refused, with
// --token-file or $FOREWARN_TOKEN it works, and forewarn audit lists the
// actions.
func TestOperatorToken(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleet, []byte("vms:\n  - {name: t0, ip: 127.0.0.60}\n"), 0o600)
	tokenFile := filepath.Join(dir, "token")
	cmd := exec.Command(binary, "serve", "--metadata-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--data", filepath.Join(dir, "data"), "--fleet", fleet, "--admin-token-file", tokenFile)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	sc.Scan()
	sc.Scan()
	adm := "http://" + strings.TrimPrefix(sc.Text(), "operator API listening on ")
	go io.Copy(io.Discard, out)

	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	token, _ := os.ReadFile(tokenFile)
	if len(strings.TrimSpace(string(token))) != 64 {
		t.Fatalf("token %q", token)
	}
	cli := func(env []string, args ...string) (string, string, int) {
		c := exec.Command(binary, append(args, "--server", adm)...)
		c.Env = append(os.Environ(), env...)
		var o, e strings.Builder
		c.Stdout, c.Stderr = &o, &e
		c.Run()
		return o.String(), e.String(), c.ProcessState.ExitCode()
	}
	if _, stderr, code := cli(nil, "vm", "restart", "t0"); code != 1 || !strings.Contains(stderr, "missing or wrong bearer token") {
		t.Fatalf("without a token: exit %d %q", code, stderr)
	}
	if _, stderr, code := cli([]string{"FOREWARN_TOKEN=wrong"}, "event", "list"); code != 1 || !strings.Contains(stderr, "missing or wrong bearer token") {
		t.Fatalf("wrong token: exit %d %q", code, stderr)
	}
	id, stderr, code := cli(nil, "vm", "restart", "t0", "--token-file", tokenFile)
	if code != 0 || len(strings.TrimSpace(id)) != 36 {
		t.Fatalf("with --token-file: exit %d %q %q", code, id, stderr)
	}
	if _, _, code := cli([]string{"FOREWARN_TOKEN=" + strings.TrimSpace(string(token))}, "event", "cancel", strings.TrimSpace(id)); code != 0 {
		t.Fatalf("with $FOREWARN_TOKEN: exit %d", code)
	}
	audit, stderr, code := cli(nil, "audit", "--token-file", tokenFile)
	lines := strings.Split(strings.TrimSpace(audit), "\n")
	want := [][]string{
		{"WHEN", "WHO", "ACTION", "STATUS"},
		{"127.0.0.1", "POST", "/v1/vms/t0/restart", "401"},
		{"token@127.0.0.1", "POST", "/v1/vms/t0/restart", "201"},
		{"token@127.0.0.1", "POST", "/v1/events/" + strings.TrimSpace(id) + "/cancel", "200"},
	}
	if code != 0 || len(lines) != len(want) {
		t.Fatalf("forewarn audit: exit %d %q\n%s", code, stderr, audit)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if i > 0 {
			f = f[1:] // the time
		}
		if strings.Join(f, " ") != strings.Join(w, " ") {
			t.Errorf("audit line %d: %q, want %q", i, lines[i], strings.Join(w, " "))
		}
	}
}
