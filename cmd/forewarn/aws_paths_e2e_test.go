package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forewarn/forewarn/aws"
)

// pathsFleet is an EC2 VM that takes IMDSv1 and one that requires
// tokens.
const pathsFleet = `vms:
  - {name: ec2_v1, ip: 127.0.0.51, provider: aws, instanceId: i-0a1b2c3d4e5f60751}
  - {name: ec2_v2, ip: 127.0.0.52, provider: aws, instanceId: i-0a1b2c3d4e5f60752, httpTokens: required}
`

// rawAnswer is what a raw request got.
type rawAnswer struct {
	status int
	header http.Header
	body   string
}

// rawRequest writes method and target, exactly as given, on a new
// connection from ip to addr, with header lines, and reads the answer.
func rawRequest(t *testing.T, addr, ip, method, target string, header ...string) rawAnswer {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawAnswer{resp.StatusCode, resp.Header, string(b)}
}

// TestAWSPathsRealSocket sends the real binary, over a socket, the
// request forms real clients send: a shell tool's //latest/meta-data/X
// and ///, a base URL with a trailing slash (PUT //latest/api/token),
// an empty segment inside the path, and cloud-init's probe of the dated
// versions (2021-03-23, 2018-09-24, 2016-09-02, then 2009-04-04) and its
// crawl of the version it finds, with an IMDSv2 token.
func TestAWSPathsRealSocket(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleet, []byte(pathsFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(dir, "data"), fleet)
	get := func(ip, target string, header ...string) rawAnswer {
		t.Helper()
		return rawRequest(t, s.metadata, ip, "GET", target, header...)
	}
	want := func(what string, a rawAnswer, status int, body string) {
		t.Helper()
		if a.status != status || a.body != body {
			t.Errorf("%s: %d %q, want %d %q", what, a.status, a.body, status, body)
		}
	}
	const v1, v2 = "127.0.0.51", "127.0.0.52"
	versions := "1.0\n2007-01-19\n2007-03-01\n2007-08-29\n2007-10-10\n2007-12-15\n2008-02-01\n2008-09-01\n" +
		"2009-04-04\n2011-01-01\n2011-05-01\n2012-01-12\n2014-02-25\n2014-11-05\n2015-10-20\n2016-04-19\n" +
		"2016-06-30\n2016-09-02\n2018-03-28\n2018-08-17\n2018-09-24\n2019-10-01\n2020-10-27\n2021-01-03\n" +
		"2021-03-23\n2021-07-15\n2022-09-24\n2024-04-11\nlatest"

	want("GET //latest/meta-data/instance-id", get(v1, "//latest/meta-data/instance-id"), 200, "i-0a1b2c3d4e5f60751")
	want("GET ///", get(v1, "///"), 200, versions)
	want("GET /", get(v1, "/"), 200, versions)
	want("GET //latest/meta-data/events/maintenance/scheduled", get(v1, "//latest/meta-data/events/maintenance/scheduled"), 200, "[]")
	rid := get(v1, "/latest//meta-data/reservation-id")
	if rid.status != 200 || !regexp.MustCompile(`^r-0[0-9a-f]{16}$`).MatchString(rid.body) {
		t.Errorf("GET /latest//meta-data/reservation-id: %d %q, want r- and 17 hex digits", rid.status, rid.body)
	}
	want("the same reservation-id at the usual path", get(v1, "/latest/meta-data/reservation-id"), 200, rid.body)

	// A base URL with a trailing slash: the token PUT and a GET, on a VM
	// that requires tokens.
	put := rawRequest(t, s.metadata, v2, "PUT", "//latest/api/token", aws.TokenTTLHeader, "21600")
	if put.status != 200 || len(put.body) != 56 || put.header.Get(aws.TokenTTLHeader) != "21600" {
		t.Fatalf("PUT //latest/api/token: %d %q %v", put.status, put.body, put.header)
	}
	tok := put.body
	want("GET //latest/meta-data/instance-id with the token", get(v2, "//latest/meta-data/instance-id", aws.TokenHeader, tok), 200, "i-0a1b2c3d4e5f60752")

	// cloud-init: the token, then a probe of each version it knows, newest
	// first, taking the first that answers; here all do.
	for _, v := range []string{"2021-03-23", "2018-09-24", "2016-09-02", "2009-04-04"} {
		want("probe of "+v, get(v2, "/"+v+"/meta-data/instance-id", aws.TokenHeader, tok), 200, "i-0a1b2c3d4e5f60752")
	}
	// Its crawl of 2021-03-23, and of 2009-04-04, where a cloud that has
	// no dated versions leaves it: each version's own keys.
	want("2021-03-23/", get(v2, "/2021-03-23/", aws.TokenHeader, tok), 200, "dynamic\nmeta-data")
	want("2021-03-23/meta-data/", get(v2, "/2021-03-23/meta-data/", aws.TokenHeader, tok), 200,
		"ami-id\nami-launch-index\nblock-device-mapping/\nevents/\nhostname\ninstance-id\ninstance-life-cycle\ninstance-type\n"+
			"local-hostname\nlocal-ipv4\nmac\nnetwork/\nplacement/\nreservation-id\nsecurity-groups\nservices/")
	want("2009-04-04/meta-data/", get(v2, "/2009-04-04/meta-data/", aws.TokenHeader, tok), 200,
		"ami-id\nami-launch-index\nblock-device-mapping/\nhostname\ninstance-id\ninstance-type\n"+
			"local-hostname\nlocal-ipv4\nplacement/\nreservation-id\nsecurity-groups")
	want("2009-04-04/meta-data/placement/availability-zone", get(v2, "/2009-04-04/meta-data/placement/availability-zone", aws.TokenHeader, tok),
		200, "us-east-1a")
	doc := get(v2, "/2009-04-04/dynamic/instance-identity/document", aws.TokenHeader, tok)
	if doc.status != 200 || !strings.Contains(doc.body, `"instanceId" : "i-0a1b2c3d4e5f60752"`) {
		t.Errorf("2009-04-04/dynamic/instance-identity/document: %d %q", doc.status, doc.body)
	}
	want("a version EC2 does not serve", get(v2, "/2010-01-01/meta-data/instance-id", aws.TokenHeader, tok), 404, notFoundPage)
	s.stop(t)
}

// notFoundPage is EC2's 404 page.
const notFoundPage = `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
		 "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
`
