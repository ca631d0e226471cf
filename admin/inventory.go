package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/engine"
	"github.com/forewarn/forewarn/fleetfile"
)

// MaxFleetBytes bounds the fleet document POST /v1/fleet/apply takes:
// room for some 300,000 VMs of the fleet file's one-line entries.
const MaxFleetBytes = 64 << 20

// applyAttempts bounds how often an apply is computed again when the
// inventory changed under it (without an If-Match of its own).
const applyAttempts = 3

// Applied is the answer of POST /v1/fleet/apply: what the document
// changes, and the inventory revision after it (before it for a dry
// run).
type Applied struct {
	Revision int64 `json:"revision"`
	DryRun   bool  `json:"dryRun,omitempty"`
	fleetfile.Changes
}

// VMDefinition is the answer of PUT, PATCH and DELETE /v1/vms/{name}:
// the VM's definition with the fleet file's keys (null once removed),
// and the inventory revision.
type VMDefinition struct {
	Name     string          `json:"name"`
	Revision int64           `json:"revision"`
	Created  bool            `json:"created,omitempty"`
	VM       json.RawMessage `json:"definition"`
	Removed  bool            `json:"removed,omitempty"`
}

// ifMatch reads the If-Match header: a quoted inventory revision, as
// the ETag of GET /v1/fleet and the revision of every inventory answer
// give it; 0 when absent. "*" matches any revision.
func ifMatch(r *http.Request) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" || v == "*" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
	if err != nil || n <= 0 {
		return 0, forewarn.Errorf(forewarn.EINVALID, "If-Match %s is not an inventory revision such as \"12\" (GET /v1/fleet answers it as its ETag)", quote(v))
	}
	return n, nil
}

// etag returns the ETag of inventory revision rev.
func etag(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }

// readBody reads r's whole body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var over *http.MaxBytesError
	if errors.As(err, &over) {
		return nil, tooLarge(limit)
	}
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "reading the body: %v", err)
	}
	return b, nil
}

// handlePutVM creates or replaces one VM from its whole definition.
func (s *Server) handlePutVM(w http.ResponseWriter, r *http.Request) {
	s.defineVM(w, r, fleetfile.ParseVM)
}

// handlePatchVM changes one VM's definition by a JSON merge patch (RFC
// 7396).
func (s *Server) handlePatchVM(w http.ResponseWriter, r *http.Request) {
	s.defineVM(w, r, func(name string, patch []byte) (*forewarn.VM, error) {
		cur := s.eng.VMNamed(name)
		if cur == nil {
			return nil, forewarn.Errorf(forewarn.ENOTFOUND, "no VM named %s", quote(name))
		}
		return fleetfile.PatchVM(cur, patch)
	})
}

// defineVM reads the body of a PUT or PATCH of the VM of r's path, makes
// its new definition with define, and puts it in the inventory.
func (s *Server) defineVM(w http.ResponseWriter, r *http.Request, define func(name string, body []byte) (*forewarn.VM, error)) {
	match, err := ifMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readBody(w, r, maxSmallBody)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	vm, err := define(r.PathValue("name"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.setVM(w, r, vm, match)
}

// setVM puts vm in the inventory and answers its definition.
func (s *Server) setVM(w http.ResponseWriter, r *http.Request, vm *forewarn.VM, match int64) {
	var created bool
	var rev int64
	for attempt := 1; ; attempt++ {
		created = s.eng.VMNamed(vm.Name) == nil
		// The engine refuses an address or instance ID another VM
		// holds, from its indexes; ParseVM checked the rest but for the
		// fleet file's one ip: any VM per provider and network, which
		// the engine's own tests do not keep to. That is checked here,
		// against the revision the change is then pinned to, so that
		// two such PUTs at once cannot both pass.
		pin := match
		if !vm.IP.IsValid() {
			if pin == 0 {
				if pin = s.eng.InventoryRevision(); pin == 0 {
					pin = -1 // an inventory that never changed
				}
			}
			if other := s.eng.LookupOn(vm.Network, netip.Addr{}, vm.Provider); other != nil && other.Name != vm.Name {
				s.writeError(w, r, forewarn.Errorf(forewarn.EINVALID, "VM %s: ip any%s is already used by %s",
					strconv.QuoteToASCII(vm.Name), forewarn.OnNetwork(vm.Network), other.Name))
				return
			}
		}
		var err error
		rev, err = s.eng.ChangeInventory(r.Context(), engine.InventoryChange{Set: []*forewarn.VM{vm}, IfMatch: pin, Owned: true})
		if forewarn.ErrorCode(err) == forewarn.EPRECONDITION && pin != match && attempt < applyAttempts {
			continue // another change came first: check again
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		break
	}
	def, err := fleetfile.EntryJSON(vm)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("ETag", etag(rev))
	s.writeJSON(w, r, status, VMDefinition{Name: vm.Name, Revision: rev, Created: created, VM: def})
}

// handleRemoveVM deregisters one VM: no Terminate, no notice.
func (s *Server) handleRemoveVM(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	match, err := ifMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rev, err := s.eng.ChangeInventory(r.Context(), engine.InventoryChange{Remove: []string{name}, IfMatch: match})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(rev))
	s.writeJSON(w, r, http.StatusOK, VMDefinition{Name: name, Revision: rev, Removed: true})
}

// handleGetFleet exports the inventory as a fleet file that apply takes
// back unchanged.
func (s *Server) handleGetFleet(w http.ResponseWriter, r *http.Request) {
	rev := s.eng.InventoryRevision()
	b, err := fleetfile.Encode(s.eng.Fleet())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("ETag", etag(rev))
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// handleApplyFleet makes the inventory equal to a fleet document: VMs it
// names are added or changed, and with prune=true VMs it does not name
// are removed, in one commit. dryRun=true only answers the diff.
func (s *Server) handleApplyFleet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dryRun, err := boolParam(q.Get("dryRun"), "dryRun")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	prune, err := boolParam(q.Get("prune"), "prune")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	match, err := ifMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readBody(w, r, MaxFleetBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A VM the inventory holds as it is is kept as the inventory's: an
	// apply that repeats most of the fleet holds one copy of it.
	doc, err := fleetfile.ParseKeeping(body, func(vm *forewarn.VM) *forewarn.VM {
		if cur := s.eng.VMNamed(vm.Name); cur != nil && *cur == *vm {
			return cur
		}
		return vm
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for attempt := 1; ; attempt++ {
		a, err := s.applyOnce(r, doc, prune, dryRun, match)
		if forewarn.ErrorCode(err) == forewarn.EPRECONDITION && match == 0 && attempt < applyAttempts {
			continue // another change came first: diff again
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("ETag", etag(a.Revision))
		s.writeJSON(w, r, http.StatusOK, a)
		return
	}
}

// applyOnce diffs doc against the inventory in force and, unless
// dryRun, commits the difference against its revision.
func (s *Server) applyOnce(r *http.Request, doc *forewarn.Fleet, prune, dryRun bool, match int64) (*Applied, error) {
	rev := s.eng.InventoryRevision()
	if match != 0 && match != rev {
		return nil, forewarn.Errorf(forewarn.EPRECONDITION,
			"the inventory is at revision %d, not %d: it changed since; read it again", rev, match)
	}
	cur := s.eng.Fleet()
	if _, err := fleetfile.Merge(cur, doc, prune); err != nil {
		return nil, err
	}
	ch := fleetfile.Diff(cur, doc, prune)
	a := &Applied{Revision: rev, DryRun: dryRun, Changes: ch}
	if dryRun || ch.Empty() {
		return a, nil
	}
	c := engine.InventoryChange{IfMatch: rev, Owned: true} // doc is this request's alone
	if rev == 0 {
		c.IfMatch = -1 // an empty inventory
	}
	for _, name := range ch.VMs.Added {
		c.Set = append(c.Set, doc.VM(name))
	}
	for _, cg := range ch.VMs.Changed {
		c.Set = append(c.Set, doc.VM(cg.Name))
	}
	c.Remove = ch.VMs.Removed
	sets := map[string]*forewarn.ScaleSet{}
	for _, ss := range doc.ScaleSets {
		sets[ss.Name] = ss
	}
	for _, name := range ch.ScaleSets.Added {
		c.SetScaleSets = append(c.SetScaleSets, sets[name])
	}
	for _, cg := range ch.ScaleSets.Changed {
		c.SetScaleSets = append(c.SetScaleSets, sets[cg.Name])
	}
	c.RemoveScaleSets = ch.ScaleSets.Removed
	after, err := s.eng.ChangeInventory(r.Context(), c)
	if err != nil {
		return nil, err
	}
	a.Revision = after
	return a, nil
}

// boolParam reads a query parameter that is true, false or absent.
func boolParam(v, name string) (bool, error) {
	switch v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, forewarn.Errorf(forewarn.EINVALID, "%s=%s: want true or false", name, quote(v))
}
