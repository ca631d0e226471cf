package aws_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/aws"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/history"
	"github.com/forewarn/forewarn/metrics"
	"github.com/forewarn/forewarn/metrics/metricstest"
)

// versionList is GET /: 1.0, the dated versions EC2 serves, and latest.
const versionList = "1.0\n2007-01-19\n2007-03-01\n2007-08-29\n2007-10-10\n2007-12-15\n2008-02-01\n2008-09-01\n" +
	"2009-04-04\n2011-01-01\n2011-05-01\n2012-01-12\n2014-02-25\n2014-11-05\n2015-10-20\n2016-04-19\n" +
	"2016-06-30\n2016-09-02\n2018-03-28\n2018-08-17\n2018-09-24\n2019-10-01\n2020-10-27\n2021-01-03\n" +
	"2021-03-23\n2021-07-15\n2022-09-24\n2024-04-11\nlatest"

// optMetaData is opt_1's meta-data/ listing at latest.
const optMetaData = "ami-id\nami-launch-index\nblock-device-mapping/\nevents/\nhostname\ninstance-id\ninstance-life-cycle\n" +
	"instance-type\nlocal-hostname\nlocal-ipv4\nmac\nnetwork/\nplacement/\nreservation-id\nsecurity-groups\nservices/"

// TestEmptySegments: a path with empty segments is the path without
// them, as EC2 reads it: a shell tool's --path X asks for
// //latest/meta-data/X and --path / for ///, and a client whose base URL
// ends in a slash PUTs //latest/api/token. The request counts under the
// cleaned path's route, and the history records the cleaned path.
func TestEmptySegments(t *testing.T) {
	synctest.Test(t, testEmptySegments)
}

func testEmptySegments(t *testing.T) {
	e, h := setup(t)
	m := metrics.New("mem")
	h.SetMetrics(m)
	hist := history.New([]string{"opt_1"}, history.DefaultSize)
	hist.Follow(e)
	h.SetHistory(hist)
	wantKeys(t, h, optAddr, []keyCase{
		{"//latest/meta-data/instance-id", 200, "i-0000000000000000b"},
		{"/latest//meta-data/instance-id", 200, "i-0000000000000000b"},
		{"/latest/meta-data//placement//region", 200, "eu-west-1"},
		{"//latest//meta-data//", 200, optMetaData},
		{"///", 200, versionList},
		{"//", 200, versionList},
		{"//2009-04-04/meta-data/instance-id", 200, "i-0000000000000000b"},
		{"//latest/meta-data/nonesuch", 404, errorPage(404)}})
	want(t, "reservation-id", do(h, req{path: "/latest//meta-data/reservation-id", remote: optAddr}), 200, "r-090e7962c015eb1ea")
	want(t, "scheduled", do(h, req{path: "//latest/meta-data/events/maintenance/scheduled", remote: optAddr}), 200, "[]")

	// The token PUT, and a GET with its token, from a VM that requires one.
	put := do(h, req{method: http.MethodPut, path: "//latest/api/token", remote: ec2Addr, header: map[string]string{aws.TokenTTLHeader: "60"}})
	if put.Code != 200 || len(put.Body.String()) != 56 || put.Header().Get(aws.TokenTTLHeader) != "60" {
		t.Fatalf("PUT //latest/api/token: %d %q %v", put.Code, put.Body, put.Header())
	}
	want(t, "GET with the token", do(h, req{path: "//latest/meta-data/instance-id", remote: ec2Addr,
		header: map[string]string{aws.TokenHeader: put.Body.String()}}), 200, "i-0000000000000000a", aws.TokenTTLHeader, "60")
	want(t, "GET //latest/api/token", do(h, req{path: "//latest/api/token", remote: ec2Addr}), 405, "", "Allow", "OPTIONS, PUT")
	want(t, "PUT of a versioned token path", do(h, req{method: http.MethodPut, path: "//2021-03-23//api/token", remote: ec2Addr,
		header: map[string]string{aws.TokenTTLHeader: "60"}}), 403, errorPage(403))

	if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=aws", "route=events", "code=200"); got != 1 {
		t.Errorf("events requests counted: %v, want 1", got)
	}
	if got := metricstest.Value(t, m, "forewarn_metadata_requests_total", "api=aws", "route=token", "code=200"); got != 1 {
		t.Errorf("token requests counted: %v, want 1", got)
	}
	entries, _ := hist.Entries("opt_1")
	if len(entries) == 0 || entries[0].Path != "/latest/meta-data/events/maintenance/scheduled" {
		t.Errorf("history: %+v, want the cleaned path first", entries)
	}
}

// TestCleanPath: each run of slashes is one.
func TestCleanPath(t *testing.T) {
	for in, out := range map[string]string{
		"/": "/", "//": "/", "///": "/", "/latest/meta-data/": "/latest/meta-data/",
		"//latest/meta-data/x": "/latest/meta-data/x", "/latest//meta-data///x//": "/latest/meta-data/x/",
	} {
		if got := aws.CleanPath(in); got != out {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, out)
		}
	}
}

// TestVersions: GET / lists 1.0, the dated versions and latest; each
// version serves the tree as it was then, a key from the version that
// brought it (EC2's category list, docs/aws-wire.md section 3); an
// unknown version is 404.
func TestVersions(t *testing.T) {
	_, h := setup(t)
	wantKeys(t, h, optAddr, []keyCase{
		{"/", 200, versionList},
		{"/1.0/", 200, "meta-data"},
		{"/1.0/meta-data/", 200, "ami-id\nami-launch-index\nhostname\ninstance-id\nlocal-ipv4\nreservation-id\nsecurity-groups"},
		{"/1.0/meta-data/instance-type", 404, errorPage(404)},
		{"/1.0/dynamic/instance-identity/document", 404, errorPage(404)},
		{"/2008-09-01/", 200, "meta-data"},
		{"/2009-04-04", 200, "dynamic\nmeta-data"},
		{"/2009-04-04/", 200, "dynamic\nmeta-data"},
		{"/2009-04-04/meta-data/", 200, "ami-id\nami-launch-index\nblock-device-mapping/\nhostname\ninstance-id\ninstance-type\n" +
			"local-hostname\nlocal-ipv4\nplacement/\nreservation-id\nsecurity-groups"},
		{"/2009-04-04/meta-data/instance-id", 200, "i-0000000000000000b"},
		{"/2009-04-04/meta-data/placement/", 200, "availability-zone"},
		{"/2009-04-04/meta-data/placement/availability-zone", 200, "eu-west-1b"},
		{"/2009-04-04/meta-data/placement/region", 404, errorPage(404)},
		{"/2009-04-04/meta-data/mac", 404, errorPage(404)},
		{"/2009-04-04/meta-data/events/maintenance/scheduled", 404, errorPage(404)},
		{"/2009-04-04/dynamic/instance-identity/", 200, "document\npkcs7\nsignature"},
		{"/2014-11-05/meta-data/services/", 200, "domain"},
		{"/2014-11-05/meta-data/services/partition", 404, errorPage(404)},
		{"/2016-09-02/meta-data/", 200, "ami-id\nami-launch-index\nblock-device-mapping/\nhostname\ninstance-id\ninstance-type\n" +
			"local-hostname\nlocal-ipv4\nmac\nnetwork/\nplacement/\nreservation-id\nsecurity-groups\nservices/"},
		{"/2016-09-02/meta-data/services/", 200, "domain\npartition"},
		{"/2016-09-02/meta-data/events/", 404, errorPage(404)},
		{"/2018-09-24/meta-data/events/", 200, "maintenance/"},
		{"/2018-09-24/meta-data/events/maintenance/scheduled", 200, "[]"},
		{"/2018-09-24/meta-data/instance-life-cycle", 404, errorPage(404)},
		{"/2019-10-01/meta-data/instance-life-cycle", 200, "on-demand"},
		{"/2020-10-27/meta-data/placement/", 200, "availability-zone\nregion"},
		{"/2021-03-23/meta-data/", 200, optMetaData},
		{"/2021-03-23/meta-data/instance-id", 200, "i-0000000000000000b"},
		{"/2024-04-11/meta-data/", 200, optMetaData},
		{"/2010-01-01/meta-data/instance-id", 404, errorPage(404)},
		{"/latest-ish/meta-data/instance-id", 404, errorPage(404)},
		{"/meta-data/instance-id", 404, errorPage(404)}})
	w := do(h, req{path: "/2009-04-04/meta-data/autoscaling/target-lifecycle-state", remote: spotAddr})
	want(t, "target-lifecycle-state before 2022", w, 404, errorPage(404))
	w = do(h, req{path: "/2022-09-24/meta-data/autoscaling/target-lifecycle-state", remote: spotAddr})
	want(t, "target-lifecycle-state in 2022-09-24", w, 200, "InService")
	w = do(h, req{path: "/2021-07-15/meta-data/", remote: spotAddr})
	want(t, "a group member's listing before 2022", w, 200, optMetaData)
	w = do(h, req{path: "/2022-09-24/meta-data/", remote: spotAddr})
	want(t, "a group member's listing in 2022-09-24", w, 200, strings.Replace(optMetaData, "ami-launch-index\n", "ami-launch-index\nautoscaling/\n", 1))
}

// TestVersionsOfSpotKeys: spot/termination-time came in 2014-11-05,
// spot/instance-action in 2016-11-15 (so version 2018-03-28), the
// rebalance recommendation in 2020-11-04 (so 2021-01-03); a version
// lists spot/ and events/recommendations/ only with what it has.
func TestVersionsOfSpotKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		if _, err := e.EvictWith(t.Context(), "spot_2", engine.VMOptions{Notice: 2 * time.Minute, Lasts: time.Minute}); err != nil {
			t.Fatal(err)
		}
		wantKeys(t, h, spotAddr, []keyCase{
			{"/2014-02-25/meta-data/spot/termination-time", 404, errorPage(404)},
			{"/2014-11-05/meta-data/spot/termination-time", 200, "2000-01-01T00:02:00Z"},
			{"/2016-09-02/meta-data/spot/", 200, "termination-time"},
			{"/2016-09-02/meta-data/spot/instance-action", 404, errorPage(404)},
			{"/2018-03-28/meta-data/spot/", 200, "instance-action\ntermination-time"},
			{"/2018-03-28/meta-data/spot/instance-action", 200, `{"action":"terminate","time":"2000-01-01T00:02:00Z"}`},
			{"/2020-10-27/meta-data/events/", 200, "maintenance/"},
			{"/2020-10-27/meta-data/events/recommendations/rebalance", 404, errorPage(404)},
			{"/2021-01-03/meta-data/events/", 200, "maintenance/\nrecommendations/"},
			{"/2021-01-03/meta-data/events/recommendations/", 200, "rebalance"}})
		want(t, "2009-04-04 meta-data/ lists no spot/", do(h, req{path: "/2009-04-04/meta-data/", remote: spotAddr}), 200,
			"ami-id\nami-launch-index\nblock-device-mapping/\nhostname\ninstance-id\ninstance-type\n"+
				"local-hostname\nlocal-ipv4\nplacement/\nreservation-id\nsecurity-groups")
		want(t, "2014-11-05 meta-data/ lists spot/", do(h, req{path: "/2014-11-05/meta-data/", remote: spotAddr}), 200,
			"ami-id\nami-launch-index\nblock-device-mapping/\nhostname\ninstance-id\ninstance-type\n"+
				"local-hostname\nlocal-ipv4\nmac\nnetwork/\nplacement/\nreservation-id\nsecurity-groups\nservices/\nspot/")
	})
}

// TestStandardKeys: the keys every EC2 instance has, with Forewarn's
// defaults for a VM whose fleet entry names none, each listed.
func TestStandardKeys(t *testing.T) {
	_, h := setup(t)
	const mac = "0e:2f:48:47:6a:6b"
	wantKeys(t, h, optAddr, []keyCase{
		{"/latest/meta-data/", 200, optMetaData},
		{"/latest/meta-data/ami-id", 200, aws.AMI},
		{"/latest/meta-data/ami-launch-index", 200, "0"},
		{"/latest/meta-data/reservation-id", 200, "r-090e7962c015eb1ea"},
		{"/latest/meta-data/security-groups", 200, "default"},
		{"/latest/meta-data/block-device-mapping/", 200, "ami\nroot"},
		{"/latest/meta-data/block-device-mapping/ami", 200, "/dev/xvda"},
		{"/latest/meta-data/block-device-mapping/root", 200, "/dev/xvda"},
		{"/latest/meta-data/services/", 200, "domain\npartition"},
		{"/latest/meta-data/services/domain", 200, "amazonaws.com"},
		{"/latest/meta-data/services/partition", 200, "aws"},
		{"/latest/meta-data/mac", 200, mac},
		{"/latest/meta-data/network/", 200, "interfaces/"},
		{"/latest/meta-data/network/interfaces/", 200, "macs/"},
		{"/latest/meta-data/network/interfaces/macs/", 200, mac + "/"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/", 200,
			"device-number\ninterface-id\nlocal-hostname\nlocal-ipv4s\nmac\nowner-id\nsecurity-groups\nsubnet-id\nvpc-id"},
		{"/latest/meta-data/network/interfaces/macs/" + mac, 200,
			"device-number\ninterface-id\nlocal-hostname\nlocal-ipv4s\nmac\nowner-id\nsecurity-groups\nsubnet-id\nvpc-id"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/device-number", 200, "0"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/interface-id", 200, "eni-05ebb260007990b24"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/local-hostname", 200, "ip-127-0-0-3.eu-west-1.compute.internal"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/local-ipv4s", 200, "127.0.0.3"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/mac", 200, mac},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/owner-id", 200, "123456789012"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/security-groups", 200, "default"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/subnet-id", 200, "subnet-023ff41e61457d390"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/vpc-id", 200, "vpc-02ab725ee2ec7460a"},
		{"/latest/meta-data/network/interfaces/macs/" + mac + "/nonesuch", 404, errorPage(404)},
		{"/latest/meta-data/network/interfaces/macs/0e:00:00:00:00:00/mac", 404, errorPage(404)},
		{"/latest/dynamic/", 200, "instance-identity/"},
		{"/latest/dynamic/instance-identity/", 200, "document\npkcs7\nsignature"}})
	// The VMs of one account, region and zone share a VPC and a subnet,
	// as in a default VPC; another region's VM has others.
	iface := func(remote, leaf string) string {
		m := do(h, req{path: "/latest/meta-data/mac", remote: remote}).Body.String()
		return do(h, req{path: "/latest/meta-data/network/interfaces/macs/" + m + "/" + leaf, remote: remote}).Body.String()
	}
	for _, leaf := range []string{"vpc-id", "subnet-id"} {
		if a, b, c := iface(spotAddr, leaf), iface(warmAddr, leaf), iface(optAddr, leaf); a != b || a == c {
			t.Errorf("%s: spot_2 %s, warm_3 %s (both us-east-1a), opt_1 %s (eu-west-1b)", leaf, a, b, c)
		}
	}
	if a, b := iface(spotAddr, "interface-id"), iface(warmAddr, "interface-id"); a == b {
		t.Errorf("spot_2 and warm_3 share the interface %s", a)
	}

	// The signature and pkcs7 have EC2's shape: base64 of a 128-byte
	// signature in 76-character lines, and of the document and that
	// signature in 64-character lines. AWS's certificates verify neither.
	doc := do(h, req{path: "/latest/dynamic/instance-identity/document", remote: optAddr}).Body.String()
	sig := do(h, req{path: "/latest/dynamic/instance-identity/signature", remote: optAddr}).Body.String()
	pkcs7 := do(h, req{path: "/latest/dynamic/instance-identity/pkcs7", remote: optAddr}).Body.String()
	rawSig := decodeLines(t, "signature", sig, 76)
	if len(rawSig) != 128 {
		t.Errorf("signature decodes to %d bytes, want 128", len(rawSig))
	}
	if raw := decodeLines(t, "pkcs7", pkcs7, 64); string(raw) != doc+string(rawSig) {
		t.Errorf("pkcs7 decodes to %q, want the document and the signature", raw)
	}
	again := do(h, req{path: "/latest/dynamic/instance-identity/signature", remote: optAddr}).Body.String()
	other := do(h, req{path: "/latest/dynamic/instance-identity/signature", remote: spotAddr}).Body.String()
	if again != sig || other == sig {
		t.Errorf("signature not stable per VM, or shared between VMs: %q, %q, %q", sig, again, other)
	}
}

// decodeLines checks that s is base64 in lines of n characters (the
// last shorter) and returns what it decodes to.
func decodeLines(t *testing.T, what, s string, n int) []byte {
	t.Helper()
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		if i < len(ls)-1 && len(l) != n || i == len(ls)-1 && (len(l) == 0 || len(l) > n) {
			t.Errorf("%s: line %d is %d characters, want %d", what, i, len(l), n)
		}
	}
	b, err := base64.StdEncoding.DecodeString(strings.Join(ls, ""))
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
	return b
}

// TestPartition: a VM in China or GovCloud has its partition's
// services.
func TestPartition(t *testing.T) {
	e, h := setup(t)
	for i, c := range []struct{ zone, partition, domain string }{
		{"cn-north-1a", "aws-cn", "amazonaws.com.cn"},
		{"us-gov-west-1a", "aws-us-gov", "amazonaws.com"},
		{"ap-southeast-2b", "aws", "amazonaws.com"},
	} {
		addr := []string{"127.0.0.31:40000", "127.0.0.32:40000", "127.0.0.33:40000"}[i]
		vm := ec2VM([]string{"cn", "gov", "ap"}[i], addr, []string{"i-00000000000000031", "i-00000000000000032", "i-00000000000000033"}[i])
		vm.Zone = c.zone
		change(t, e, engine.InventoryChange{Set: []*forewarn.VM{vm}})
		want(t, c.zone+" partition", key(h, addr, "/latest/meta-data/services/partition"), 200, c.partition)
		want(t, c.zone+" domain", key(h, addr, "/latest/meta-data/services/domain"), 200, c.domain)
	}
}

// TestFleetKeys: the IDs a fleet entry names are the VM's, in its keys
// and its identity document.
func TestFleetKeys(t *testing.T) {
	e, h := setup(t)
	const addr = "127.0.0.40:40000"
	vm := ec2VM("ids", addr, "i-00000000000000040")
	vm.AMIID, vm.AccountID, vm.SecurityGroups = "ami-0abcdef1234567890", "210987654321", "web\nssh access"
	vm.SubnetID, vm.VPCID = "subnet-be9b61d7", "vpc-0123456789abcdef0"
	change(t, e, engine.InventoryChange{Set: []*forewarn.VM{vm}})
	m := key(h, addr, "/latest/meta-data/mac").Body.String()
	for path, body := range map[string]string{
		"/latest/meta-data/ami-id":                                            "ami-0abcdef1234567890",
		"/latest/meta-data/security-groups":                                   "web\nssh access",
		"/latest/meta-data/network/interfaces/macs/" + m + "/security-groups": "web\nssh access",
		"/latest/meta-data/network/interfaces/macs/" + m + "/owner-id":        "210987654321",
		"/latest/meta-data/network/interfaces/macs/" + m + "/subnet-id":       "subnet-be9b61d7",
		"/latest/meta-data/network/interfaces/macs/" + m + "/vpc-id":          "vpc-0123456789abcdef0",
	} {
		want(t, path, key(h, addr, path), 200, body)
	}
	doc := key(h, addr, "/latest/dynamic/instance-identity/document").Body.String()
	for _, s := range []string{`"accountId" : "210987654321"`, `"imageId" : "ami-0abcdef1234567890"`} {
		if !strings.Contains(doc, s) {
			t.Errorf("identity document lacks %s:\n%s", s, doc)
		}
	}
}

// keyCase is a GET and its answer: status and exact body.
type keyCase struct {
	path   string
	status int
	body   string
}

// wantKeys checks each GET of cases, from remote.
func wantKeys(t *testing.T, h http.Handler, remote string, cases []keyCase) {
	t.Helper()
	for _, c := range cases {
		want(t, c.path, do(h, req{path: c.path, remote: remote}), c.status, c.body)
	}
}

// TestIsPath: the paths under latest and under each version EC2 serves,
// leading slashes or not, are EC2's; /, the other APIs' paths and names
// that only look like a version are not.
func TestIsPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/latest": true, "/latest/": true, "//latest/meta-data/instance-id": true, "/latest//meta-data": true,
		"/1.0/meta-data/": true, "/2009-04-04/meta-data/": true, "/2024-04-11": true,
		"/": false, "///": false, "/latestx/": false, "/2009-04-05/meta-data/": false, "/0.1/meta-data/": false,
		"/metadata/instance": false, "/computeMetadata/v1/": false,
	} {
		if got := aws.IsPath(p); got != want {
			t.Errorf("IsPath(%q) = %v, want %v", p, got, want)
		}
	}
}
