package fleetfile_test

import (
	"strings"
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/fleetfile"
)

// TestParseRefusesMoreThanOneDocument: a second YAML document is refused,
// not ignored; one document, with or without its "---", still loads.
func TestParseRefusesMoreThanOneDocument(t *testing.T) {
	for _, in := range []string{
		"vms:\n  - {name: a, ip: 10.0.0.1}\n---\nvms:\n  - {name: b, ip: 10.0.0.2}\n",
		"---\nvms:\n  - {name: a, ip: 10.0.0.1}\n---\nscaleSets:\n  - {name: ss}\n",
		"vms:\n  - {name: a, ip: 10.0.0.1}\n---\n",
		"vms:\n  - {name: a, ip: 10.0.0.1}\n---\n: [\n",
	} {
		f, err := fleetfile.Parse([]byte(in))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || !strings.Contains(forewarn.ErrorMessage(err), "more than one YAML document") {
			t.Errorf("Parse(%q) = %v, %v; want a refusal naming the second document", in, f, err)
		}
	}
	for _, in := range []string{
		"vms:\n  - {name: a, ip: 10.0.0.1}\n",
		"---\nvms:\n  - {name: a, ip: 10.0.0.1}\n",
		"---\nvms:\n  - {name: a, ip: 10.0.0.1}\n...\n",
	} {
		if _, err := fleetfile.Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}

// TestParseRefusesAddressesNoRequestComesFrom: the unspecified, multicast
// and broadcast addresses are refused, naming the VM.
func TestParseRefusesAddressesNoRequestComesFrom(t *testing.T) {
	for ip, why := range map[string]string{
		"0.0.0.0":            "0.0.0.0 is the unspecified address",
		"'::'":               ":: is the unspecified address",
		"'::ffff:0.0.0.0'":   "0.0.0.0 is the unspecified address",
		"224.0.0.1":          "224.0.0.1 is a multicast address",
		"239.255.255.250":    "239.255.255.250 is a multicast address",
		"'ff02::1'":          "ff02::1 is a multicast address",
		"255.255.255.255":    "255.255.255.255 is the broadcast address",
		"'::ffff:224.0.0.9'": "224.0.0.9 is a multicast address",
	} {
		_, err := fleetfile.Parse([]byte("vms:\n  - {name: ok, ip: 10.0.0.1}\n  - {name: web_7, ip: " + ip + "}\n"))
		want := "vms[1] (web_7): ip " + why + "; no request comes from it"
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != want {
			t.Errorf("ip %s: %v\nwant %s", ip, err, want)
		}
	}
}

// TestParseRefusesHiddenCharacters: names (and the other keys operators
// see) with control, bidirectional-override or other invisible characters
// are refused; the message names the VM with those characters escaped,
// so the message itself cannot hide anything.
func TestParseRefusesHiddenCharacters(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{`{name: "web\n0", ip: 10.0.0.2}`, `vms[1] ("web\n0"): name holds the invisible or control character U+000A`},
		{`{name: "web\r0", ip: 10.0.0.2}`, `vms[1] ("web\r0"): name holds the invisible or control character U+000D`},
		{`{name: "web\e[2J", ip: 10.0.0.2}`, `vms[1] ("web\x1b[2J"): name holds the invisible or control character U+001B`},
		{`{name: "web_\u202e0bad", ip: 10.0.0.2}`, `vms[1] ("web_\u202e0bad"): name holds the invisible or control character U+202E`},
		{`{name: "web_\u20660", ip: 10.0.0.2}`, `vms[1] ("web_\u20660"): name holds the invisible or control character U+2066`},
		{`{name: "web\u200b_0", ip: 10.0.0.2}`, `vms[1] ("web\u200b_0"): name holds the invisible or control character U+200B`},
		{`{name: "\ufeffweb", ip: 10.0.0.2}`, `vms[1] ("\ufeffweb"): name holds the invisible or control character U+FEFF`},
		{`{name: "web\u00a00", ip: 10.0.0.2}`, `vms[1] ("web\u00a00"): name holds the invisible or control character U+00A0`},
		{`{name: "web\u20280", ip: 10.0.0.2}`, `vms[1] ("web\u20280"): name holds the invisible or control character U+2028`},
		{`{name: "web\x850", ip: 10.0.0.2}`, `vms[1] ("web\u00850"): name holds the invisible or control character U+0085`},
		{`{name: web_1, ip: 10.0.0.2, availabilitySet: "a\u202eb"}`, `vms[1] ("web_1"): availabilitySet holds the invisible or control character U+202E`},
		{`{name: gce_1, ip: 10.0.0.2, provider: gce, project: "p\tq"}`, `vms[1] ("gce_1"): project holds the invisible or control character U+0009`},
	}
	for _, c := range cases {
		_, err := fleetfile.Parse([]byte("vms:\n  - {name: ok, ip: 10.0.0.1}\n  - " + c.yaml + "\n"))
		if forewarn.ErrorCode(err) != forewarn.EINVALID || forewarn.ErrorMessage(err) != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
	_, err := fleetfile.Parse([]byte("vms:\n  - {name: ok, ip: 10.0.0.1}\nscaleSets:\n  - {name: \"s\\u202es\"}\n"))
	if want := `scaleSets[0] ("s\u202es"): name holds the invisible or control character U+202E`; forewarn.ErrorMessage(err) != want {
		t.Errorf("scale set: %v\nwant %s", err, want)
	}
	// Visible non-ASCII names are fine.
	if _, err := fleetfile.Parse([]byte("vms:\n  - {name: \"wéb-ünïcode_0\", ip: 10.0.0.1}\n")); err != nil {
		t.Errorf("visible non-ASCII name: %v", err)
	}
}
