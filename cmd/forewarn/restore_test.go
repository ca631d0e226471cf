package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const restoreFleet = `vms:
  - {name: r_0, ip: 127.0.0.70}
  - {name: r_1, ip: 127.0.0.71}
`

// TestRestoredStoreKeepsIncarnations is issue 21's seventh attack, on
// the real binary: restoring an older forewarn.db (as the refusal for a
// missing store advises), or putting a valid empty store in its place,
// sent DocumentIncarnation back (5 to 2, or to 1). Now the mark beside
// the store raises every VM's incarnation past the highest served, and
// the server logs that it did.
func TestRestoredStoreKeepsIncarnations(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(restoreFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	inc := func(s *server, ip string) int64 {
		t.Helper()
		d, _, err := getDoc(t.Context(), s, ip)
		if err != nil {
			t.Fatal(err)
		}
		return d.DocumentIncarnation
	}
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(data, "forewarn.db")

	s := startServer(t, data, fleet)
	inc(s, "127.0.0.70")
	inc(s, "127.0.0.71")
	s.mustCLI(t, "event", "create", "--type", "Freeze", "--vm", "r_0")
	backupInc := inc(s, "127.0.0.70")
	s.stop(t)
	copyFile(db, filepath.Join(dir, "backup.db"))

	// More changes after the backup: the incarnation moves on.
	s = startServer(t, data, fleet)
	for range 3 {
		id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "Freeze", "--vm", "r_0"))
		s.mustCLI(t, "event", "start", id)
		s.mustCLI(t, "event", "complete", id)
	}
	served := inc(s, "127.0.0.70")
	if served <= backupInc+2 {
		t.Fatalf("incarnation %d after the backup's %d: the changes did not move it", served, backupInc)
	}
	other := inc(s, "127.0.0.71")
	s.stop(t)

	// The older copy restored.
	copyFile(filepath.Join(dir, "backup.db"), db)
	s = startServer(t, data, fleet)
	got := inc(s, "127.0.0.70")
	if got <= served {
		t.Fatalf("after restoring the older store r_0's incarnation is %d; it was served %d", got, served)
	}
	if o := inc(s, "127.0.0.71"); o <= other {
		t.Fatalf("after restoring the older store r_1's incarnation is %d; it was served %d", o, other)
	}
	// A restart without a restore changes nothing.
	s.stop(t)
	if !strings.Contains(s.stderr.String(), "the store is behind its incarnation mark") {
		t.Errorf("no log line about the raise: %s", s.stderr)
	}
	s = startServer(t, data, fleet)
	if again := inc(s, "127.0.0.70"); again != got {
		t.Fatalf("a plain restart moved r_0's incarnation from %d to %d", got, again)
	}
	s.stop(t)

	// A valid empty store put in place: made by a server on a fresh
	// directory of its own.
	fresh := filepath.Join(dir, "fresh")
	s = startServer(t, fresh, fleet)
	s.stop(t)
	copyFile(filepath.Join(fresh, "forewarn.db"), db)
	s = startServer(t, data, fleet)
	if e := inc(s, "127.0.0.70"); e <= got {
		t.Fatalf("after an empty store was put in place r_0's incarnation is %d; it was served %d", e, got)
	}
	s.stop(t)
}
