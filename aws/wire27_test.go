package aws_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
)

// TestCrawlEveryVersion crawls every version GET / lists, as cloud-init
// crawls the version it picks (cloudinit/sources/helpers/ec2.py: a
// listed name ending in / is a directory, asked with its slash, any
// other a leaf; one failed request and the whole crawl comes back
// empty), from VMs in each state that changes a listing: with a
// scheduled event, with a rebalance recommendation and an interruption
// notice, in a warm pool. Every name a listing gives answers 200, each
// listing is sorted without repeats, a directory answers the same
// without its final slash, and every version from 2009-04-04 (the one
// cloud-init falls back to) has the instance ID and identity document.
func TestCrawlEveryVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, h := setup(t)
		if _, err := e.Create(t.Context(), engine.Spec{Type: forewarn.SystemReboot, VMs: []string{"opt_1"}, Notice: 48 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.EvictWith(t.Context(), "spot_2", engine.VMOptions{Notice: 2 * time.Minute, Lasts: time.Minute}); err != nil {
			t.Fatal(err)
		}
		versions := strings.Split(do(h, req{path: "/", remote: optAddr}).Body.String(), "\n")
		for _, v := range []string{"2021-03-23", "2018-09-24", "2016-09-02", "2009-04-04", "latest"} {
			if !slices.Contains(versions, v) {
				t.Errorf("GET / does not list %s: %q", v, versions)
			}
		}
		for _, vm := range []struct{ name, addr, id string }{
			{"opt_1", optAddr, "i-0000000000000000b"},
			{"spot_2", spotAddr, "i-0000000000000000c"},
			{"warm_3", warmAddr, "i-0000000000000000d"},
		} {
			for _, v := range versions {
				// A version lists its trees without a slash, as EC2 does
				// (dynamic, meta-data); cloud-init asks for each by name.
				got := map[string]string{}
				for _, tree := range strings.Split(do(h, req{path: "/" + v + "/", remote: vm.addr}).Body.String(), "\n") {
					crawl(t, h, vm.addr, "/"+v+"/"+tree+"/", got)
				}
				if v < "2009-04-04" { // 1.0 and the 2007-2008 versions
					continue
				}
				if id := got["/"+v+"/meta-data/instance-id"]; id != vm.id {
					t.Errorf("%s at %s: instance-id %q, want %s", vm.name, v, id, vm.id)
				}
				if doc := got["/"+v+"/dynamic/instance-identity/document"]; !strings.Contains(doc, `"instanceId" : "`+vm.id+`"`) {
					t.Errorf("%s at %s: identity document %q", vm.name, v, doc)
				}
			}
		}
	})
}

// crawl GETs the listing at dir (a path ending in a slash) from remote,
// then each directory and leaf it names, recording each leaf's body in
// got by path.
func crawl(t *testing.T, h http.Handler, remote, dir string, got map[string]string) {
	t.Helper()
	w := do(h, req{path: dir, remote: remote})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/plain" || w.Body.Len() == 0 {
		t.Errorf("listing %s from %s: %d %q %q", dir, remote, w.Code, w.Header().Get("Content-Type"), w.Body)
		return
	}
	list := w.Body.String()
	if bare := do(h, req{path: strings.TrimSuffix(dir, "/"), remote: remote}); bare.Code != http.StatusOK || bare.Body.String() != list {
		t.Errorf("%s without its slash: %d %q, want 200 %q", dir, bare.Code, bare.Body, list)
	}
	names := strings.Split(list, "\n")
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("listing %s from %s is not sorted or repeats a name: %q", dir, remote, names)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "/") {
			crawl(t, h, remote, dir+name, got)
			continue
		}
		leaf := do(h, req{path: dir + name, remote: remote})
		if leaf.Code != http.StatusOK || leaf.Header().Get("Content-Type") != "text/plain" || leaf.Header().Get("Server") != "EC2ws" {
			t.Errorf("%s, listed in %s, from %s: %d %v %q", name, dir, remote, leaf.Code, leaf.Header(), leaf.Body)
		}
		got[dir+name] = leaf.Body.String()
	}
}
