package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStoreDiskFull runs the real binary with its data directory on a
// 4 MiB tmpfs of its own (mounted in a private mount namespace: as root,
// or as an unprivileged user where user namespaces are allowed; skipped
// elsewhere) and fills the disk with events until bbolt's commit gets a
// genuine ENOSPC. That write is refused with 507 and "no space left on
// device"; the operator's reads and the VMs' reads keep working.
func TestStoreDiskFull(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) to mount a small tmpfs")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	fleet := filepath.Join(dir, "fleet.yaml")
	os.Mkdir(mnt, 0o700)
	// Besides full_0, 100 VMs with 1,000-byte names, so that an event
	// naming them all holds 100 KB (a description holds at most 1 KiB,
	// and a value of a create's body at most 64 KiB). They share an
	// availability set: one scope group, so one event per create.
	var yaml strings.Builder
	yaml.WriteString("vms:\n  - {name: full_0, ip: 127.0.0.72, availabilitySet: full}\n")
	names := []string{"full_0"}
	for i := range 100 {
		name := fmt.Sprintf("full_%04d_%s", i, strings.Repeat("x", 990))
		names = append(names, name)
		fmt.Fprintf(&yaml, "  - {name: %s, ip: 127.1.%d.%d, availabilitySet: full}\n", name, i>>8, i&255)
	}
	os.WriteFile(fleet, []byte(yaml.String()), 0o600)
	ns := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		ns = append([]string{"--user", "--map-root-user"}, ns...)
	}
	const script = `mount -t tmpfs -o size=4m forewarn-full "$1" || exit 99; exec "$2" serve --data "$1/data" --fleet "$3" --metadata-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --allow-short-notice --rate-limit 0`
	cmd := exec.Command(unshare, append(ns, "sh", "-c", script, "sh", mnt, binary, fleet)...)
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Skip("unshare:", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var md, adm string
	lines := bufio.NewScanner(out)
	for md == "" || adm == "" {
		if !lines.Scan() {
			cmd.Wait()
			if cmd.ProcessState.ExitCode() == 99 || strings.Contains(stderr.String(), "unshare") {
				t.Skipf("cannot mount a tmpfs in a private namespace here: %s", stderr.String())
			}
			t.Fatalf("server exited before listening: %s", stderr.String())
		}
		if a, ok := strings.CutPrefix(lines.Text(), "metadata API listening on "); ok {
			md = a
		}
		if a, ok := strings.CutPrefix(lines.Text(), "operator API listening on "); ok {
			adm = a
		}
	}
	go io.Copy(io.Discard, out)

	vmGet := func() (int, string) {
		req, _ := http.NewRequest("GET", "http://"+md+"/metadata/scheduledevents?api-version=2020-07-01", nil)
		req.Header.Set("Metadata", "true")
		resp, err := vmClient("127.0.0.72").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := vmGet(); code != 200 {
		t.Fatalf("VM before the disk fills: %d", code)
	}
	// Each event carries 800 KB; the fourth or fifth cannot fit.
	body := `{"type":"Freeze","vms":["` + strings.Join(names, `","`) + `"],"notice":"1h"}`
	made, refused := 0, ""
	for range 100 {
		resp, err := http.Post("http://"+adm+"/v1/events", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 201 {
			made++
			continue
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusInsufficientStorage || e.Error.Code != "insufficient_storage" ||
			!strings.Contains(e.Error.Message, "no space left on device") {
			t.Fatalf("write %d on a filling disk: %d %s\nserver log:\n%s", made+1, resp.StatusCode, b, stderr.String())
		}
		refused = e.Error.Message
		break
	}
	if refused == "" || made == 0 {
		t.Fatalf("%d events fit on 4 MiB, and none was refused (%s)\n%s", made, refused, stderr.String())
	}
	t.Logf("%d events fit; the next was refused: %s", made, refused)
	// The server logs the failure as it answers: wait a little for it.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), "no space left on device"); {
		if time.Now().After(deadline) {
			t.Errorf("the server log does not say what failed:\n%s", stderr.String())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Reads keep working, and show exactly the events that were made.
	resp, err := http.Get("http://" + adm + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Events []json.RawMessage }
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(list.Events) != made {
		t.Fatalf("operator read on a full disk: %d, %d events, want %d", resp.StatusCode, len(list.Events), made)
	}
	if code, doc := vmGet(); code != 200 || strings.Count(doc, `"EventId"`) != made {
		t.Fatalf("VM read on a full disk: %d %.200s", code, doc)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM on a full disk: %v\n%s", err, stderr.String())
	}
}
