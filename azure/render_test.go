package azure

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/mem"
)

// TestSharedParts checks that a document assembled from shared parts is
// byte for byte the document rendered whole, with its Content-Length and
// an ETag that moves with it, and that VMs seeing one event share its
// rendering and their header values rather than each holding a copy.
func TestSharedParts(t *testing.T) {
	f := &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: "a0", Provider: forewarn.Azure, AvailabilitySet: "a"},
		{Name: "a1", Provider: forewarn.Azure, AvailabilitySet: "a", Spot: true},
		{Name: "a2", Provider: forewarn.Azure, AvailabilitySet: "a"},
		{Name: "ss_0", Provider: forewarn.Azure, ScaleSet: "ss", InstanceID: "0"},
		{Name: "FrontEnd_IN_0", Provider: forewarn.Azure, CloudService: "cs"},
	}}
	e, err := engine.New(t.Context(), engine.Config{Store: mem.New(), Fleet: f, AllowShortNotice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	docs := map[string]*doc{}
	r := &renderer{vmNamed: f.VM}
	e.Subscribe(func(v *engine.View) { docs[v.VM.Name] = r.render(v) })

	create := func(s engine.Spec) *forewarn.Event {
		t.Helper()
		if s.Notice == 0 {
			s.Notice = time.Hour
		}
		ev, err := e.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	create(engine.Spec{Type: forewarn.Reboot, VMs: []string{"a0", "a2"}, Source: forewarn.User,
		Description: "a \"quoted\" <tag> & \u2028 line\nbreak"})
	create(engine.Spec{Type: forewarn.Preempt, VMs: []string{"a1"}, Source: forewarn.Platform})
	create(engine.Spec{Type: forewarn.Terminate, VMs: []string{"ss_0"}, Notice: 5 * time.Minute})
	create(engine.Spec{Type: forewarn.Freeze, VMs: []string{"FrontEnd_IN_0"}})

	check := func() {
		t.Helper()
		for name, d := range docs {
			v := e.View(name)
			for vi := range versions {
				want := appendDocument(nil, &versions[vi], v, f.VM)
				var got bytes.Buffer
				d.writeTo(&got, vi)
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("%s %s:\n got %s\nwant %s", name, versions[vi].name, got.Bytes(), want)
				}
				if d.clens[vi][0] != strconv.Itoa(len(want)) {
					t.Errorf("%s %s: Content-Length %s, body %d bytes", name, versions[vi].name, d.clens[vi][0], len(want))
				}
			}
		}
	}
	check()
	// Every VM of set a sees both of the set's events through one
	// rendering, and a0 and a2 have one document's headers.
	for i := range docs["a0"].parts {
		if docs["a0"].parts[i] != docs["a1"].parts[i] || docs["a1"].parts[i] != docs["a2"].parts[i] {
			t.Errorf("event %d of set a is rendered more than once", i)
		}
	}
	if len(docs["a0"].parts) != 2 {
		t.Fatalf("a0 sees %d events, want 2", len(docs["a0"].parts))
	}
	if docs["a0"].headers != docs["a2"].headers || docs["a0"].headers == docs["ss_0"].headers {
		t.Errorf("equal documents do not share their headers, or unequal ones do")
	}
	// A change moves the ETag of every VM that sees it, and of none other.
	before := map[string]string{}
	for name, d := range docs {
		before[name] = d.etags[6][0]
	}
	ev := docs["a0"].parts[0]
	if err := e.Approve(t.Context(), "a1", []string{e.View("a0").Events[0].ID}); err != nil {
		t.Fatal(err)
	}
	check()
	for name, d := range docs {
		moved := d.etags[6][0] != before[name]
		if want := name == "a0" || name == "a1" || name == "a2"; moved != want {
			t.Errorf("%s: ETag moved %v, want %v", name, moved, want)
		}
	}
	if docs["a0"].parts[0] == ev {
		t.Errorf("a started event kept its Scheduled rendering")
	}
}

// TestCountedVersion: the api-versions whose requests count in a
// report finding are the preview, for any VM, and those that hide an
// event type the VM can get: Terminate before 2019-01-01 for a scale set
// VM, Preempt before 2017-11-01 for a Spot VM; none for a plain VM at a
// version the preview's successors have, nor an unknown version.
func TestCountedVersion(t *testing.T) {
	plain := &forewarn.VM{Name: "p"}
	set := &forewarn.VM{Name: "s", ScaleSet: "ss"}
	spot := &forewarn.VM{Name: "o", Spot: true}
	for _, c := range []struct {
		v                string
		plain, set, spot bool
	}{
		{"2017-03-01", true, true, true},
		{"2017-08-01", false, true, true},
		{"2017-11-01", false, true, false},
		{"2019-01-01", false, false, false},
		{"2020-07-01", false, false, false},
		{"2099-01-01", false, false, false},
		{"", false, false, false},
	} {
		for _, vc := range []struct {
			vm   *forewarn.VM
			want bool
		}{{plain, c.plain}, {set, c.set}, {spot, c.spot}} {
			if got := CountedVersion(vc.vm, c.v); got != vc.want {
				t.Errorf("CountedVersion(%s, %q) = %v, want %v", vc.vm.Name, c.v, got, vc.want)
			}
		}
	}
}
