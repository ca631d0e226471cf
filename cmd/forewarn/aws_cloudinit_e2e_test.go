package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/forewarn/forewarn/aws"
)

// cloudInitFleet is one EC2 VM that requires tokens, as cloud-init
// meets it on AWS (it always asks for a token there).
const cloudInitFleet = `vms:
  - {name: ci_vm, ip: 127.77.27.1, provider: aws, instanceId: i-0c1d2e3f405162777, availabilityZone: eu-central-1b, httpTokens: required}
`

// TestCloudInitRealSocket runs, against the real binary over a socket,
// what cloud-init's DataSourceEc2 does on AWS, during an active
// scheduled event: a token PUT to /latest/api/token, the probe of
// instance-id at its extended versions newest first (2021-03-23,
// 2018-09-24, 2016-09-02), the first that answers 200 chosen, else its
// minimum 2009-04-04 (get_metadata_api_version); then the crawl of that
// version's meta-data/ and dynamic/instance-identity, in which one failed
// request leaves it with no metadata and no instance-id
// (helpers/ec2.py). It also reads the event as a shell tool's --path
// does, through //latest/meta-data/.
func TestCloudInitRealSocket(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(cloudInitFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	const ip, instanceID = "127.77.27.1", "i-0c1d2e3f405162777"
	id := strings.TrimSpace(s.mustCLI(t, "event", "create", "--type", "system-reboot", "--vm", "ci_vm", "--notice", "1h"))

	put := rawRequest(t, s.metadata, ip, "PUT", "/latest/api/token", aws.TokenTTLHeader, "21600")
	if put.status != 200 || len(put.body) != 56 {
		t.Fatalf("PUT /latest/api/token: %d %q", put.status, put.body)
	}
	get := func(target string) rawAnswer {
		t.Helper()
		return rawRequest(t, s.metadata, ip, "GET", target, aws.TokenHeader, put.body)
	}

	// get_metadata_api_version.
	version := "2009-04-04"
	for _, v := range []string{"2021-03-23", "2018-09-24", "2016-09-02"} {
		if a := get("/" + v + "/meta-data/instance-id"); a.status == 200 {
			version = v
			break
		}
	}
	if version != "2021-03-23" {
		t.Errorf("cloud-init would use %s, want 2021-03-23", version)
	}

	// The crawl of the version chosen, and of the fallback a cloud
	// without the newer versions leaves it at.
	for _, v := range []string{version, "2009-04-04"} {
		md := map[string]string{}
		cloudInitCrawl(t, get, "/"+v+"/meta-data/", md)
		if md["instance-id"] != instanceID || md["placement/availability-zone"] != "eu-central-1b" {
			t.Errorf("%s: crawled instance-id %q, availability-zone %q", v, md["instance-id"], md["placement/availability-zone"])
		}
		for key, re := range map[string]string{
			"reservation-id": `^r-0[0-9a-f]{16}$`, "ami-launch-index": `^0$`, "security-groups": `^default$`,
			"block-device-mapping/ami": `^/dev/xvda$`, "block-device-mapping/root": `^/dev/xvda$`,
		} {
			if !regexp.MustCompile(re).MatchString(md[key]) {
				t.Errorf("%s: crawled %s %q, want %s", v, key, md[key], re)
			}
		}
		identity := map[string]string{}
		cloudInitCrawl(t, get, "/"+v+"/dynamic/instance-identity", identity)
		var doc struct{ InstanceID, Region string }
		if err := json.Unmarshal([]byte(identity["document"]), &doc); err != nil || doc.InstanceID != instanceID || doc.Region != "eu-central-1" {
			t.Errorf("%s: identity document %q: %v", v, identity["document"], err)
		}
		if identity["pkcs7"] == "" || identity["signature"] == "" {
			t.Errorf("%s: identity %v", v, identity)
		}
		// No user-data: 404, which cloud-init reads as none.
		if a := get("/" + v + "/user-data"); a.status != 404 {
			t.Errorf("%s/user-data: %d, want 404", v, a.status)
		}
	}

	md := map[string]string{}
	cloudInitCrawl(t, get, "/"+version+"/meta-data/", md)
	mac := md["mac"]
	if !regexp.MustCompile(`^0e(:[0-9a-f]{2}){5}$`).MatchString(mac) ||
		md["network/interfaces/macs/"+mac+"/local-ipv4s"] != ip || md["network/interfaces/macs/"+mac+"/device-number"] != "0" ||
		md["services/partition"] != "aws" || md["services/domain"] != "amazonaws.com" {
		t.Errorf("crawled mac %q, its interface and services: %v", mac, md)
	}
	scheduled := md["events/maintenance/scheduled"]
	if !strings.Contains(scheduled, `"EventId" : "`+aws.EventID(id)+`"`) || !strings.Contains(scheduled, `"State" : "active"`) {
		t.Errorf("crawled events/maintenance/scheduled %q, want the active event %s", scheduled, aws.EventID(id))
	}
	// A shell tool's --path events/maintenance/scheduled.
	if a := get("//latest/meta-data/events/maintenance/scheduled"); a.status != 200 || a.body != scheduled ||
		a.header.Get("Content-Type") != "text/plain" || a.header.Get("Server") != "EC2ws" {
		t.Errorf("GET //latest/meta-data/events/maintenance/scheduled: %d %v %q, want 200 %q", a.status, a.header, a.body, scheduled)
	}
	s.stop(t)
}

// cloudInitCrawl crawls the listing at path as cloud-init's
// MetadataMaterializer does: a name ending in / is a directory, asked
// with its slash, any other a leaf, asked below path with a slash
// between. It records each leaf's body in got by its path below the
// first listing, and fails the test on any answer but 200, as one
// failure ends cloud-init's crawl with nothing.
func cloudInitCrawl(t *testing.T, get func(target string) rawAnswer, path string, got map[string]string) {
	t.Helper()
	var walk func(path, prefix string)
	walk = func(path, prefix string) {
		a := get(path)
		if a.status != 200 || a.body == "" {
			t.Errorf("GET %s: %d %q", path, a.status, a.body)
			return
		}
		base := strings.TrimSuffix(path, "/") + "/"
		for _, name := range strings.Split(a.body, "\n") {
			if dir, ok := strings.CutSuffix(name, "/"); ok {
				walk(base+dir+"/", prefix+dir+"/")
				continue
			}
			leaf := get(base + name)
			if leaf.status != 200 {
				t.Errorf("GET %s, listed in %s: %d", base+name, path, leaf.status)
			}
			got[prefix+name] = leaf.body
		}
	}
	walk(path, "")
}
