package fleetfile_test

import (
	"reflect"
	"testing"

	"github.com/forewarn/forewarn/fleetfile"
)

// linesCases are documents the line reader reads, and documents it
// leaves to the YAML decoder; FuzzParse starts from them too.
var linesCases = []struct {
	doc   string
	lines bool // read by the line reader
}{
	{"vms:\n  - {name: a, ip: 1.2.3.4}\n", true},
	{"vms:\n- name: a\n  ip: 1.2.3.4\n", true},
	{"# a fleet\nvms:   # the VMs\n\n  - name: a    # a comment\n      # a comment\n    ip: 1.2.3.4 # c\n  - {name: b, ip: 1.2.3.5}  # c\n", true},
	{"vms:\n  -  name: a\n     ip: 1.2.3.4\n", true},
	{"vms:\n  - name: 'a'\n    ip: \"1.2.3.4\"\n    cloudService: \"x # y, z}\"\n", true},
	{"vms:\n  - {name: \"wéb\", ip: '1.2.3.4', cloudService: \"{a: b}\"}\n", true},
	{"vms:\n  - name: a\n    ip:\n    zone: # nothing\n", true},
	{"vms:\r\n  - {name: a, ip: 1.2.3.4}\r\n", true},
	{"vms: []\nscaleSets: []\n", true},
	{"scaleSets:\nvms:\n  - {}\n  - { }\n", true},
	{"vms:\n  - {name: a, updateDomain: 10, gpu: false, soleTenant: true, httpPutResponseHopLimit: -3}\n", true},
	{"vms:\n  - {name: 1e3, zone: 0x1F, project: 1_000, machineType: 2001-12-14, placementGroup: true, scaleSet: No}\n", true},
	{"vms:\n  - name: a\nscaleSets:\n  - name: s\n    terminateNotBeforeTimeout: PT5M\n    terminateNotifications: false\n", true},

	{"vms:\n  - name: a\n    ip: 1.2.3.4\n      more\n", false},
	{"vms:\n  - name: a#b\n", false},
	{"vms:\n  - {name: a, ip: 1.2.3.4}#c\n", false},
	{"vms:\n  - name: a\n    ip:\n    - x\n", false},
	{"vms:\n  - name: 'it''s'\n", false},
	{"vms:\n  - name: \"a\\tb\"\n", false},
	{"vms:\n  - {name: a, updateDomain: 010}\n", false},
	{"vms:\n  - {name: a, updateDomain: -0}\n", false},
	{"vms:\n  - {name: a, updateDomain: 1.0}\n", false},
	{"vms:\n  - {name: a, updateDomain: \"1\"}\n", false},
	{"vms:\n  - {name: a, updateDomain: 99999999999999999999}\n", false},
	{"vms:\n  - {name: a, gpu: yes}\n", false},
	{"vms:\n  - {name: a, gpu: \"true\"}\n", false},
	{"vms:\n  - {name: null}\n", false},
	{"vms:\n  - {name: -a}\n", false},
	{"vms:\n  - {name: .a}\n", false},
	{"vms:\n  - {name: a,}\n", false},
	{"vms:\n  - {name:a}\n", false},
	{"vms:\n  - {name: a\n     , ip: 1.2.3.4}\n", false},
	{"vms:\n  - name: a\n  ip: 1.2.3.4\n", false},
	{"vms:\n  - name: a\n   ip: 1.2.3.4\n", false},
	{"vms:\n  - name: a\n    name: b\n", false},
	{"vms:\n  - {name: a, Name: b}\n", false},
	{"vms:\n  - name: a\nvms:\n  - name: b\n", false},
	{"vms:\n  - name: a\n    ip: fd00::1\n", false},
	{"vms:\n  - name: wéb\n", false},
	{"vms:\n\t- name: a\n", false},
	{"---\nvms:\n  - name: a\n", false},
	{"vms:\n  - name: a\n---\n", false},
	{"vms: &x\n  - name: a\n", false},
	{"  vms:\n  - name: a\n", false},
	{"vms:\n  - name: a\n -  name: b\n", false},
	{"\ufeffvms:\n  - name: a\n", false},
	{"# only a comment\n", false},
	{"", false},
}

// TestLinesReadAlike: the line reader reads the YAML it knows as the
// YAML decoder does, and leaves the rest to it.
func TestLinesReadAlike(t *testing.T) {
	for _, c := range linesCases {
		fast, slow, path, err := fleetfile.DecodePaths([]byte(c.doc))
		if got := path == "lines"; got != c.lines {
			t.Errorf("%q: read by the line reader: %v, want %v", c.doc, got, c.lines)
		}
		if path == "lines" && (err != nil || !reflect.DeepEqual(fast, slow)) {
			t.Errorf("%q: the line reader read\n%+v\nthe YAML decoder\n%+v, %v", c.doc, fast, slow, err)
		}
	}
}
