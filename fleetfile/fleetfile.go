// Package fleetfile reads and writes fleet files, the YAML (or JSON)
// documents that tell a Forewarn server which VMs it answers for, and
// builds the default fleet used when there is none.
//
// The inventory a server keeps is changed with the same documents and
// the same rules, so this package also gives what changing it needs:
// ParseVM and PatchVM read one VM's definition (a fleet file entry as
// JSON, or a JSON merge patch of it: MergePatch), Merge holds an apply
// to the rules that span VMs, Merge and Diff say
// what an apply of a whole document makes and changes, and Encode and
// EntryJSON write an inventory and a definition back, so that Parse of
// Encode's output gives the fleet back. Every refusal is an EINVALID
// error with the fleet file's message, naming the VM and the key.
package fleetfile

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/forewarn/forewarn"
)

// file is the shape of a fleet file. The json keys are the yaml keys:
// a JSON document is read as the YAML it also is, or on the fast path
// that reads it alike (json.go), and EntryJSON writes an entry with them.
type file struct {
	VMs       []vmEntry       `yaml:"vms" json:"vms,omitempty"`
	ScaleSets []scaleSetEntry `yaml:"scaleSets" json:"scaleSets,omitempty"`
}

type scaleSetEntry struct {
	Name string `yaml:"name" json:"name,omitempty"`
	// An ISO 8601 duration, PT5M to PT15M; PT5M when left out.
	TerminateNotBeforeTimeout *string `yaml:"terminateNotBeforeTimeout" json:"terminateNotBeforeTimeout,omitempty"`
	// Whether a delete raises a Terminate event (seed 004's
	// scheduledEventsProfile opt-in); true when left out.
	TerminateNotifications *bool `yaml:"terminateNotifications" json:"terminateNotifications,omitempty"`
}

type vmEntry struct {
	Name     string `yaml:"name" json:"name,omitempty"`
	IP       string `yaml:"ip" json:"ip,omitempty"`
	Network  string `yaml:"network" json:"network,omitempty"`
	Host     string `yaml:"host" json:"host,omitempty"`
	Provider string `yaml:"provider" json:"provider,omitempty"`
	// Azure topology.
	AvailabilitySet string `yaml:"availabilitySet" json:"availabilitySet,omitempty"`
	UpdateDomain    *int   `yaml:"updateDomain" json:"updateDomain,omitempty"`
	CloudService    string `yaml:"cloudService" json:"cloudService,omitempty"`
	ScaleSet        string `yaml:"scaleSet" json:"scaleSet,omitempty"`
	InstanceID      string `yaml:"instanceId" json:"instanceId,omitempty"`
	PlacementGroup  string `yaml:"placementGroup" json:"placementGroup,omitempty"`
	// Azure: Spot or Regular.
	Priority string `yaml:"priority" json:"priority,omitempty"`
	// Compute Engine.
	OnHostMaintenance string `yaml:"onHostMaintenance" json:"onHostMaintenance,omitempty"`
	GPU               bool   `yaml:"gpu" json:"gpu,omitempty"`
	Preemptible       bool   `yaml:"preemptible" json:"preemptible,omitempty"`
	ProvisioningModel string `yaml:"provisioningModel" json:"provisioningModel,omitempty"`
	SoleTenant        bool   `yaml:"soleTenant" json:"soleTenant,omitempty"`
	Zone              string `yaml:"zone" json:"zone,omitempty"`
	MachineType       string `yaml:"machineType" json:"machineType,omitempty"`
	Project           string `yaml:"project" json:"project,omitempty"`
	// EC2 (instanceId above is the EC2 instance ID on an aws VM).
	InstanceType             string `yaml:"instanceType" json:"instanceType,omitempty"`
	AvailabilityZone         string `yaml:"availabilityZone" json:"availabilityZone,omitempty"`
	AutoScalingGroup         string `yaml:"autoScalingGroup" json:"autoScalingGroup,omitempty"`
	WarmPool                 string `yaml:"warmPool" json:"warmPool,omitempty"`
	Market                   string `yaml:"market" json:"market,omitempty"`
	SpotInterruptionBehavior string `yaml:"spotInterruptionBehavior" json:"spotInterruptionBehavior,omitempty"`
	HTTPTokens               string `yaml:"httpTokens" json:"httpTokens,omitempty"`
	HopLimit                 *int   `yaml:"httpPutResponseHopLimit" json:"httpPutResponseHopLimit,omitempty"`
	AMIID                    string `yaml:"amiId" json:"amiId,omitempty"`
	AccountID                string `yaml:"accountId" json:"accountId,omitempty"`
	// SecurityGroups are names separated by commas.
	SecurityGroups string `yaml:"securityGroups" json:"securityGroups,omitempty"`
	SubnetID       string `yaml:"subnetId" json:"subnetId,omitempty"`
	VPCID          string `yaml:"vpcId" json:"vpcId,omitempty"`
}

// Compute Engine defaults for keys a fleet file leaves out.
const (
	DefaultZone        = "us-central1-a"
	DefaultMachineType = "e2-standard-2"
	DefaultProject     = "forewarn-project"
)

// EC2 defaults for keys a fleet file leaves out: EC2's own launch
// defaults for the metadata options (docs/aws-wire.md).
const (
	DefaultAvailabilityZone = "us-east-1a"
	DefaultInstanceType     = "m5.large"
	DefaultHTTPTokens       = "optional"
	DefaultHopLimit         = 1
)

// Load reads and parses the fleet file at path.
func Load(path string) (*forewarn.Fleet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "read fleet file: %v", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "fleet file %s: %s", path, forewarn.ErrorMessage(err))
	}
	return f, nil
}

// Parse parses a fleet document, YAML or JSON: its vms and its
// scaleSets. Unknown keys, duplicate keys or names, an address used
// twice on one network (a network's ip: any once per provider), keys of
// the other provider, topologies Azure does not allow and bad values
// are refused with an EINVALID error naming the VM (or scale set) and
// the key. A JSON document is read as the YAML it also is, with the same
// rules and messages. JSON, and YAML written one entry a line (as Encode
// writes it) or in plain block mappings, are read on fast paths that
// read them alike (json.go, yamllines.go): 100,000 VMs in about 0.2 s,
// where the YAML decoder takes 1 s.
func Parse(data []byte) (*forewarn.Fleet, error) { return ParseKeeping(data, nil) }

// ParseKeeping is Parse that hands each VM, once checked, to keep, and
// puts in the fleet the VM keep returns: an equal one the caller holds
// already, say, so that a document repeating most of an inventory holds
// no second copy of it. A nil keep keeps each VM as it is.
func ParseKeeping(data []byte, keep func(*forewarn.VM) *forewarn.VM) (*forewarn.Fleet, error) {
	var f file
	var p *parsed
	switch {
	case decodeJSON(data, &f):
	case decodeLines(data, &f, newParsed(&p, items(data), keep).add):
		// The VMs were checked as they were read.
	default:
		f, p = file{}, nil
		if err := decodeYAML(data, &f); err != nil {
			return nil, err
		}
	}
	if p == nil {
		newParsed(&p, len(f.VMs), keep)
		for i := range f.VMs {
			p.add(&f.VMs[i])
		}
	}
	if p.n == 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "no VMs: the vms list is empty")
	}
	if p.err != nil {
		return nil, p.err
	}
	fleet := p.fleet
	sets := map[string]int{}
	for i := range f.ScaleSets {
		s, err := scaleSetOf(i, &f.ScaleSets[i], sets)
		if err != nil {
			return nil, err
		}
		fleet.ScaleSets = append(fleet.ScaleSets, s)
	}
	return fleet, nil
}

// parsed collects the VMs of a fleet document as their entries are read:
// the first entry's error, if any, and the VMs before it.
type parsed struct {
	fleet *forewarn.Fleet
	r     *registry
	n     int // entries read
	err   error
	keep  func(*forewarn.VM) *forewarn.VM // see ParseKeeping
}

// newParsed sets *p to a new parsed with room for n VMs, and returns it.
func newParsed(p **parsed, n int, keep func(*forewarn.VM) *forewarn.VM) *parsed {
	*p = &parsed{fleet: &forewarn.Fleet{VMs: make([]*forewarn.VM, 0, n)}, r: newRegistry(n), keep: keep}
	return *p
}

// add checks the next entry, e, as a fleet file checks a VM, after the
// entries before it. After an error it only counts.
func (p *parsed) add(e *vmEntry) {
	i := p.n
	p.n++
	if p.err != nil {
		return
	}
	vm, err := vmOf(place{index: i}, e, p.r)
	if err != nil {
		p.err = err
		return
	}
	if p.keep != nil {
		vm = p.keep(vm)
	}
	p.fleet.VMs = append(p.fleet.VMs, vm)
}

// decodeYAML decodes data, one YAML document, into f, refusing unknown
// and duplicate keys.
func decodeYAML(data []byte, f *file) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil {
		if errors.Is(err, io.EOF) {
			return forewarn.Errorf(forewarn.EINVALID, "no VMs: the file is empty")
		}
		return forewarn.Errorf(forewarn.EINVALID, "%s", yamlMessage(err))
	}
	// A second document would be ignored: refuse it rather than load half
	// of what the file says.
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return forewarn.Errorf(forewarn.EINVALID, "the file holds more than one YAML document (a \"---\" line starts another); put every VM and scale set in one document")
	}
	return nil
}

// place names a VM entry in messages: vms[3] (web_3) in a fleet file,
// VM "web_3" for a VM defined alone. It is formatted only when a message
// needs it.
type place struct {
	// index is the entry's place in the vms list, or -1 for a VM alone.
	index int
	// name is the entry's name; "" names the entry by its place only.
	name string
	// quote shows the name quoted, with invisible characters escaped.
	quote bool
}

// alone is the place of the VM named name defined alone (ParseVM).
func alone(name string) place { return place{index: -1, name: name, quote: true} }

// named returns p naming the entry name.
func (p place) named(name string) place {
	p.name, p.quote = name, p.index < 0
	return p
}

func (p place) String() string {
	if p.index < 0 {
		if p.name == "" {
			return "VM"
		}
		return "VM " + strconv.QuoteToASCII(p.name)
	}
	s := "vms[" + strconv.Itoa(p.index) + "]"
	switch {
	case p.quote:
		s += " (" + strconv.QuoteToASCII(p.name) + ")"
	case p.name != "":
		s += " (" + p.name + ")"
	}
	return s
}

// registry holds the names, the addresses (by network) and the EC2
// instance IDs of the VMs checked so far, which the next may not reuse.
type registry struct {
	names     map[string]int // the index of the VM of each name
	addrs     map[addrKey]string
	instances map[string]string
}

// addrKey is an address a VM claims on its network: its IP, or for a
// VM of ip: any (the zero IP), its provider's callers.
type addrKey struct {
	network string
	ip      netip.Addr
	any     forewarn.Provider
}

// addrKeyOf returns the address vm claims.
func addrKeyOf(vm *forewarn.VM) addrKey {
	if vm.IP.IsValid() {
		return addrKey{network: vm.Network, ip: vm.IP}
	}
	return addrKey{network: vm.Network, any: vm.Provider}
}

func newRegistry(n int) *registry {
	return &registry{names: make(map[string]int, n), addrs: make(map[addrKey]string, n), instances: map[string]string{}}
}

// addr claims vm's address on its network (the zero IP: every caller of
// its provider there) for the VM at p.
func (r *registry) addr(p place, vm *forewarn.VM) error {
	k := addrKeyOf(vm)
	if other, dup := r.addrs[k]; dup {
		return addrUsed(p, vm, other)
	}
	r.addrs[k] = p.name
	return nil
}

// addrUsed is the error of the VM vm at p whose address on its network
// the VM named other holds: ip 10.0.0.5 is already used by web_1, or
// ip 10.0.0.5 on network blue is already used by web_1.
func addrUsed(p fmt.Stringer, vm *forewarn.VM, other string) error {
	return forewarn.Errorf(forewarn.EINVALID, "%s: ip %s%s is already used by %s", p, ipText(vm.IP), forewarn.OnNetwork(vm.Network), other)
}

// plainName is the form of a network's and a host's name: 1 to 63
// letters, digits, '.', '_' and '-', starting with a letter or digit.
var plainName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidNetwork reports whether name is a network's name, as a VM's
// network, a relay's listener and the relays file give it: 1 to 63
// letters, digits, '.', '_' and '-', starting with a letter or digit.
func ValidNetwork(name string) bool { return plainName.MatchString(name) }

// checkName refuses value, the VM entry's key key (network or host),
// unless it is empty or of plainName's form; where names the entry:
// vms[0] (a): host "a b" is not a host name: ...
func checkName(where place, key, value string) error {
	if value == "" || plainName.MatchString(value) {
		return nil
	}
	return forewarn.Errorf(forewarn.EINVALID, "%s: %s %s is not a %s name: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit",
		where, key, strconv.QuoteToASCII(value), key)
}

// ipText is ip as a fleet file writes it: "any" for the zero IP.
func ipText(ip netip.Addr) string {
	if !ip.IsValid() {
		return anyIP
	}
	return ip.String()
}

// anyIP is the ip of a VM that answers every caller of its provider's
// API whose address is no other VM's, as the default fleet's VMs do.
const anyIP = "any"

// instance claims the EC2 instance ID id for the VM at p.
func (r *registry) instance(p place, id string) error {
	if other, dup := r.instances[id]; dup {
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceId %s is already used by %s", p, id, other)
	}
	r.instances[id] = p.name
	return nil
}

// vmOf checks the VM entry e at p as a fleet file checks it and returns
// the VM it defines, with the defaults filled in. When r is not nil, e
// may not reuse a name, address or EC2 instance ID r holds, and claims
// its own.
func vmOf(p place, e *vmEntry, r *registry) (*forewarn.VM, error) {
	vm := new(forewarn.VM)
	if err := vmInto(vm, p, e, r); err != nil {
		return nil, err
	}
	return vm, nil
}

// vmInto is vmOf into vm, which it overwrites whole: a caller that only
// checks reuses one VM.
func vmInto(vm *forewarn.VM, p place, e *vmEntry, r *registry) error {
	*vm = forewarn.VM{}
	if e.Name == "" {
		return forewarn.Errorf(forewarn.EINVALID, "%s: name is required", p)
	}
	if err := visible(place{index: p.index, name: e.Name, quote: true}, e); err != nil {
		return err
	}
	where := p.named(e.Name)
	if strings.ContainsAny(e.Name, " \t\r\n,/\"\\") {
		return forewarn.Errorf(forewarn.EINVALID, "%s: name may not contain spaces, commas, slashes, quotes or backslashes", where)
	}
	if r != nil {
		if j, dup := r.names[e.Name]; dup {
			return forewarn.Errorf(forewarn.EINVALID, "%s: name is already used by vms[%d]", where, j)
		}
		r.names[e.Name] = p.index
	}
	vm.Name, vm.Provider = e.Name, forewarn.Azure
	switch strings.ToLower(e.Provider) {
	case "", "azure":
	case "gce":
		vm.Provider = forewarn.GCE
	case "aws":
		vm.Provider = forewarn.AWS
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: provider %q is not azure, gce or aws", where, e.Provider)
	}
	if e.IP == "" {
		return forewarn.Errorf(forewarn.EINVALID, "%s: ip is required", where)
	}
	var ip netip.Addr
	if e.IP != anyIP {
		var err error
		ip, err = netip.ParseAddr(e.IP)
		if err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "%s: ip %q is not an IP address (or any)", where, e.IP)
		}
		ip = ip.Unmap()
		if why := notSource(ip); why != "" {
			return forewarn.Errorf(forewarn.EINVALID, "%s: ip %s is %s; no request comes from it", where, ip, why)
		}
	}
	if err := checkName(where, "network", e.Network); err != nil {
		return err
	}
	if err := checkName(where, "host", e.Host); err != nil {
		return err
	}
	vm.IP, vm.Network, vm.Host = ip, e.Network, e.Host
	if r != nil {
		if err := r.addr(where, vm); err != nil {
			return err
		}
	}
	if err := providerKeys(where, e, vm); err != nil {
		return err
	}
	if r != nil && vm.Provider == forewarn.AWS {
		if err := r.instance(where, vm.InstanceID); err != nil {
			return err
		}
	}
	return nil
}

// scaleSetOf checks the scale set entry e, the i-th of the file, and
// returns the scale set it defines. sets maps the names of the entries
// before it to their index.
func scaleSetOf(i int, e *scaleSetEntry, sets map[string]int) (*forewarn.ScaleSet, error) {
	if e.Name == "" {
		return nil, forewarn.Errorf(forewarn.EINVALID, "scaleSets[%d]: name is required", i)
	}
	if r, ok := hidden(e.Name); ok {
		return nil, forewarn.Errorf(forewarn.EINVALID, "scaleSets[%d] (%s): name holds the invisible or control character %U", i, strconv.QuoteToASCII(e.Name), r)
	}
	where := fmt.Sprintf("scaleSets[%d] (%s)", i, e.Name)
	if j, dup := sets[e.Name]; dup {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: name is already used by scaleSets[%d]", where, j)
	}
	sets[e.Name] = i
	s := &forewarn.ScaleSet{Name: e.Name, TerminateTimeout: forewarn.DefaultTerminateTimeout}
	if t := e.TerminateNotBeforeTimeout; t != nil {
		d, err := ParseISODuration(*t)
		if err != nil {
			return nil, forewarn.Errorf(forewarn.EINVALID, "%s: terminateNotBeforeTimeout %v", where, err)
		}
		if d < forewarn.MinTerminateTimeout || d > forewarn.MaxTerminateTimeout {
			return nil, forewarn.Errorf(forewarn.EINVALID, "%s: terminateNotBeforeTimeout %q is outside PT5M..PT15M", where, *t)
		}
		s.TerminateTimeout = d
	}
	if n := e.TerminateNotifications; n != nil {
		s.DisableTerminateNotifications = !*n
	}
	return s, nil
}

// visible checks that the VM entry e's name and the other keys shown to
// operators hold no character that could hide or disguise them on a
// terminal or in a log; where names the entry.
func visible(where place, e *vmEntry) error {
	for _, k := range []struct{ key, value string }{
		{"name", e.Name}, {"availabilitySet", e.AvailabilitySet}, {"cloudService", e.CloudService},
		{"scaleSet", e.ScaleSet}, {"instanceId", e.InstanceID}, {"placementGroup", e.PlacementGroup},
		{"zone", e.Zone}, {"machineType", e.MachineType}, {"project", e.Project},
		{"instanceType", e.InstanceType}, {"availabilityZone", e.AvailabilityZone}, {"autoScalingGroup", e.AutoScalingGroup},
		{"securityGroups", e.SecurityGroups},
	} {
		if r, ok := hidden(k.value); ok {
			return forewarn.Errorf(forewarn.EINVALID, "%s: %s holds the invisible or control character %U", where, k.key, r)
		}
	}
	return nil
}

// hidden returns the first character of s that would hide or disguise
// text on a terminal or in a log, and reports whether there is one:
// control characters (newlines, escape), format characters (bidirectional
// overrides and isolates, zero-width characters, the byte order mark,
// the soft hyphen), line and paragraph separators, spaces other than the
// ASCII space, and bytes that are not UTF-8 (reported as U+FFFD).
func hidden(s string) (rune, bool) {
	ascii := true
	for i := 0; i < len(s) && ascii; i++ {
		// In ASCII, only the control characters hide anything.
		if c := s[i]; c < ' ' || c == 0x7f {
			return rune(c), true
		}
		ascii = s[i] < utf8.RuneSelf
	}
	if ascii {
		return 0, false
	}
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) ||
			(unicode.IsSpace(r) && r != ' ') {
			return r, true
		}
	}
	return 0, false
}

// broadcast is the IPv4 limited broadcast address.
var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// notSource says why ip cannot be the source address of a request, or
// returns "" when it can be.
func notSource(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip == broadcast:
		return "the broadcast address"
	}
	return ""
}

// instanceID is the form of a scale set instance ID: a decimal number
// (uniform scale sets) or 8 hex digits (flexible scale sets).
var instanceID = regexp.MustCompile(`^[0-9]+$|^[0-9a-f]{8}$`)

// azureKeys checks and applies the Azure topology keys: availability
// set, update domain, cloud service, scale set and placement group.
func azureKeys(where place, e *vmEntry, vm *forewarn.VM) error {
	const oneGroup = "a VM is in at most one availability set, cloud service or scale set"
	for _, c := range []struct {
		a, b   string
		set    bool
		reason string
	}{
		{"availabilitySet", "scaleSet", e.AvailabilitySet != "" && e.ScaleSet != "", oneGroup},
		{"availabilitySet", "cloudService", e.AvailabilitySet != "" && e.CloudService != "", oneGroup},
		{"cloudService", "scaleSet", e.CloudService != "" && e.ScaleSet != "", oneGroup},
		{"availabilitySet", "zone", e.AvailabilitySet != "" && e.Zone != "", "an availability set is not zonal"},
	} {
		if c.set {
			return forewarn.Errorf(forewarn.EINVALID, "%s: %s cannot be combined with %s; %s", where, c.a, c.b, c.reason)
		}
	}
	switch {
	case e.ScaleSet != "" && e.InstanceID == "":
		return forewarn.Errorf(forewarn.EINVALID, "%s: scaleSet needs instanceId", where)
	case e.InstanceID != "" && e.ScaleSet == "":
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceId needs scaleSet", where)
	case e.PlacementGroup != "" && e.ScaleSet == "":
		return forewarn.Errorf(forewarn.EINVALID, "%s: placementGroup needs scaleSet", where)
	case e.InstanceID != "" && !instanceID.MatchString(e.InstanceID):
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceId %q is not a decimal number or 8 lowercase hex digits", where, e.InstanceID)
	case e.ScaleSet != "" && e.Name != e.ScaleSet+"_"+e.InstanceID:
		return forewarn.Errorf(forewarn.EINVALID, "%s: name must be %s_%s (scaleSet %s + \"_\" + instanceId %s)", where, e.ScaleSet, e.InstanceID, e.ScaleSet, e.InstanceID)
	}
	if e.UpdateDomain != nil {
		if *e.UpdateDomain < 0 {
			return forewarn.Errorf(forewarn.EINVALID, "%s: updateDomain %d is negative", where, *e.UpdateDomain)
		}
		vm.UpdateDomain = *e.UpdateDomain
	}
	vm.AvailabilitySet = e.AvailabilitySet
	vm.CloudService = e.CloudService
	vm.ScaleSet = e.ScaleSet
	vm.InstanceID = e.InstanceID
	vm.PlacementGroup = e.PlacementGroup
	return nil
}

// key is a fleet file key and whether an entry sets it.
type key struct {
	name string
	set  bool
}

// foreign refuses the first key of keys that e sets: it belongs to
// provider owner, not to vm's.
func foreign(where place, vm *forewarn.VM, owner string, keys []key) error {
	// A slice, not a map, so that the first key set is always the one named.
	for _, k := range keys {
		if k.set {
			article := "a"
			if owner != "gce" {
				article = "an"
			}
			return forewarn.Errorf(forewarn.EINVALID, "%s: %s is %s %s key; this VM's provider is %s", where, k.name, article, owner, vm.Provider)
		}
	}
	return nil
}

// gceOnly, azureOnly and awsOnly are the keys of one provider (instanceId
// is both Azure's and EC2's, with different meanings; zone both Azure's
// and Compute Engine's).
func gceOnly(e *vmEntry) []key {
	return []key{
		{"onHostMaintenance", e.OnHostMaintenance != ""}, {"gpu", e.GPU}, {"preemptible", e.Preemptible},
		{"provisioningModel", e.ProvisioningModel != ""}, {"soleTenant", e.SoleTenant},
		{"machineType", e.MachineType != ""}, {"project", e.Project != ""},
	}
}

func azureOnly(e *vmEntry) []key {
	return []key{
		{"availabilitySet", e.AvailabilitySet != ""}, {"updateDomain", e.UpdateDomain != nil},
		{"cloudService", e.CloudService != ""}, {"scaleSet", e.ScaleSet != ""},
		{"placementGroup", e.PlacementGroup != ""}, {"priority", e.Priority != ""},
	}
}

func awsOnly(e *vmEntry) []key {
	return []key{
		{"instanceType", e.InstanceType != ""}, {"availabilityZone", e.AvailabilityZone != ""},
		{"autoScalingGroup", e.AutoScalingGroup != ""}, {"warmPool", e.WarmPool != ""}, {"market", e.Market != ""},
		{"spotInterruptionBehavior", e.SpotInterruptionBehavior != ""}, {"httpTokens", e.HTTPTokens != ""},
		{"httpPutResponseHopLimit", e.HopLimit != nil}, {"amiId", e.AMIID != ""}, {"accountId", e.AccountID != ""},
		{"securityGroups", e.SecurityGroups != ""}, {"subnetId", e.SubnetID != ""}, {"vpcId", e.VPCID != ""},
	}
}

// providerKeys checks and applies the keys that belong to one provider.
func providerKeys(where place, e *vmEntry, vm *forewarn.VM) error {
	if vm.Provider == forewarn.AWS {
		return awsKeys(where, e, vm)
	}
	if err := foreign(where, vm, "aws", awsOnly(e)); err != nil {
		return err
	}
	if vm.Provider == forewarn.Azure {
		if err := foreign(where, vm, "gce", gceOnly(e)); err != nil {
			return err
		}
		if err := azureKeys(where, e, vm); err != nil {
			return err
		}
		switch strings.ToLower(e.Priority) {
		case "", "regular":
		case "spot":
			vm.Spot = true
		default:
			return forewarn.Errorf(forewarn.EINVALID, "%s: priority %q is not Spot or Regular", where, e.Priority)
		}
		vm.Zone = e.Zone
		return nil
	}
	if e.Priority != "" {
		return forewarn.Errorf(forewarn.EINVALID, "%s: priority is an azure key; use preemptible or provisioningModel on gce", where)
	}
	if err := foreign(where, vm, "azure", append(azureOnly(e), key{"instanceId", e.InstanceID != ""})); err != nil {
		return err
	}
	switch strings.ToUpper(e.ProvisioningModel) {
	case "", "STANDARD":
	case "SPOT":
		vm.Spot = true
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: provisioningModel %q is not STANDARD or SPOT", where, e.ProvisioningModel)
	}
	vm.Preemptible = e.Preemptible
	vm.GPU = e.GPU
	vm.SoleTenant = e.SoleTenant
	switch ohm := strings.ToUpper(e.OnHostMaintenance); {
	case ohm == "" && (vm.GPU || vm.Evictable()):
		vm.OnHostMaintenance = "TERMINATE"
	case ohm == "":
		vm.OnHostMaintenance = "MIGRATE"
	case ohm == "MIGRATE" && vm.GPU:
		return forewarn.Errorf(forewarn.EINVALID, "%s: onHostMaintenance MIGRATE is not possible with gpu: true (GPU VMs are stopped, not migrated)", where)
	case ohm == "MIGRATE" && vm.Evictable():
		return forewarn.Errorf(forewarn.EINVALID, "%s: onHostMaintenance MIGRATE is not possible for a preemptible or Spot VM", where)
	case ohm == "MIGRATE" || ohm == "TERMINATE":
		vm.OnHostMaintenance = ohm
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: onHostMaintenance %q is not MIGRATE or TERMINATE", where, e.OnHostMaintenance)
	}
	vm.Zone = cmp.Or(e.Zone, DefaultZone)
	vm.MachineType = cmp.Or(e.MachineType, DefaultMachineType)
	vm.Project = cmp.Or(e.Project, DefaultProject)
	return nil
}

// ec2InstanceID is the form of an EC2 instance ID: i- and 8 or 17
// lowercase hex digits.
var ec2InstanceID = regexp.MustCompile(`^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)

// ec2Zone is the form of an EC2 availability zone, such as us-east-1a.
var ec2Zone = regexp.MustCompile(`^[a-z]{2}(?:-[a-z]+)+-[0-9]+[a-z]$`)

// DefaultInstanceID returns the instance ID of an EC2 VM whose entry
// gives none: i- and 17 hex digits of a hash of its name, the same on
// every load.
func DefaultInstanceID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "i-" + hex.EncodeToString(sum[:9])[:17]
}

// awsKeys checks and applies the EC2 keys, refusing the other providers'.
func awsKeys(where place, e *vmEntry, vm *forewarn.VM) error {
	if err := foreign(where, vm, "azure", azureOnly(e)); err != nil {
		return err
	}
	if err := foreign(where, vm, "gce", append(gceOnly(e), key{"zone", e.Zone != ""})); err != nil {
		return err
	}
	vm.InstanceID = e.InstanceID
	switch {
	case vm.InstanceID == "":
		vm.InstanceID = DefaultInstanceID(e.Name)
	case !ec2InstanceID.MatchString(vm.InstanceID):
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceId %q is not i- and 17 (or 8) lowercase hex digits", where, e.InstanceID)
	}
	vm.Zone = cmp.Or(e.AvailabilityZone, DefaultAvailabilityZone)
	if !ec2Zone.MatchString(vm.Zone) {
		return forewarn.Errorf(forewarn.EINVALID, "%s: availabilityZone %q is not an EC2 availability zone such as us-east-1a", where, vm.Zone)
	}
	vm.MachineType = cmp.Or(e.InstanceType, DefaultInstanceType)
	if strings.ContainsAny(vm.MachineType, " /") {
		return forewarn.Errorf(forewarn.EINVALID, "%s: instanceType %q is not an EC2 instance type such as m5.large", where, vm.MachineType)
	}
	vm.AutoScalingGroup = e.AutoScalingGroup
	switch w := strings.ToLower(e.WarmPool); {
	case w == "":
	case e.AutoScalingGroup == "":
		return forewarn.Errorf(forewarn.EINVALID, "%s: warmPool needs autoScalingGroup", where)
	case w == "stopped" || w == "running" || w == "hibernated":
		vm.WarmPool = "Warmed:" + strings.ToUpper(w[:1]) + w[1:]
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: warmPool %q is not Stopped, Running or Hibernated", where, e.WarmPool)
	}
	switch strings.ToLower(e.Market) {
	case "", "on-demand":
	case "spot":
		vm.Spot = true
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: market %q is not spot or on-demand", where, e.Market)
	}
	switch b := strings.ToLower(e.SpotInterruptionBehavior); {
	case b != "" && !vm.Spot:
		return forewarn.Errorf(forewarn.EINVALID, "%s: spotInterruptionBehavior needs market: spot", where)
	case b == "" && vm.Spot:
		vm.SpotInterruptionBehavior = "terminate"
	case b == "" || b == "terminate" || b == "stop" || b == "hibernate":
		vm.SpotInterruptionBehavior = b
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: spotInterruptionBehavior %q is not terminate, stop or hibernate", where, e.SpotInterruptionBehavior)
	}
	switch t := strings.ToLower(e.HTTPTokens); t {
	case "":
		vm.HTTPTokens = DefaultHTTPTokens
	case "optional", "required":
		vm.HTTPTokens = t
	default:
		return forewarn.Errorf(forewarn.EINVALID, "%s: httpTokens %q is not optional or required", where, e.HTTPTokens)
	}
	vm.HopLimit = DefaultHopLimit
	if h := e.HopLimit; h != nil {
		if *h < 1 || *h > 64 {
			return forewarn.Errorf(forewarn.EINVALID, "%s: httpPutResponseHopLimit %d is outside 1..64", where, *h)
		}
		vm.HopLimit = *h
	}
	return ec2IDs(where, e, vm)
}

// ec2IDs checks and applies the EC2 IDs an aws VM's entry e names: its
// image, account, subnet and VPC, and its security groups' names.
func ec2IDs(where place, e *vmEntry, vm *forewarn.VM) error {
	for _, k := range []struct {
		key, value string
		form       *regexp.Regexp
		to         *string
		example    string
	}{
		{"amiId", e.AMIID, ec2AMI, &vm.AMIID, "ami- and 8 or 17 lowercase hex digits"},
		{"accountId", e.AccountID, ec2Account, &vm.AccountID, "12 digits"},
		{"subnetId", e.SubnetID, ec2Subnet, &vm.SubnetID, "subnet- and 8 or 17 lowercase hex digits"},
		{"vpcId", e.VPCID, ec2VPC, &vm.VPCID, "vpc- and 8 or 17 lowercase hex digits"},
	} {
		if k.value != "" && !k.form.MatchString(k.value) {
			return forewarn.Errorf(forewarn.EINVALID, "%s: %s %q is not %s", where, k.key, k.value, k.example)
		}
		*k.to = k.value
	}
	vm.SecurityGroups = ""
	if e.SecurityGroups == "" {
		return nil
	}
	names := strings.Split(e.SecurityGroups, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if names[i] == "" || len(names[i]) > 255 {
			return forewarn.Errorf(forewarn.EINVALID, "%s: securityGroups %q holds an empty name or one over 255 characters", where, e.SecurityGroups)
		}
	}
	vm.SecurityGroups = strings.Join(names, "\n")
	return nil
}

// The forms of the EC2 IDs a fleet file may name.
var (
	ec2AMI     = regexp.MustCompile(`^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)
	ec2Account = regexp.MustCompile(`^[0-9]{12}$`)
	ec2Subnet  = regexp.MustCompile(`^subnet-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)
	ec2VPC     = regexp.MustCompile(`^vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)
)

// Default returns the fleet used without a fleet file: one Azure VM,
// named after the host, that answers every caller of the Azure API, one
// Compute Engine VM, named after the host with "-gce", that answers
// every caller of the Compute Engine API, and one EC2 VM, named after
// the host with "-aws", that answers every caller of the EC2 API.
func Default() *forewarn.Fleet {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "forewarn-vm"
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	return &forewarn.Fleet{VMs: []*forewarn.VM{
		{Name: name, Provider: forewarn.Azure},
		{Name: name + "-gce", Provider: forewarn.GCE, OnHostMaintenance: "MIGRATE",
			Zone: DefaultZone, MachineType: DefaultMachineType, Project: DefaultProject},
		{Name: name + "-aws", Provider: forewarn.AWS, InstanceID: DefaultInstanceID(name + "-aws"),
			Zone: DefaultAvailabilityZone, MachineType: DefaultInstanceType, HTTPTokens: DefaultHTTPTokens, HopLimit: DefaultHopLimit},
	}}
}

// unknownKey matches the YAML decoder's words for a key the fleet file
// does not have.
var unknownKey = regexp.MustCompile(`field (.+) not found in type fleetfile\.(vmEntry|file|scaleSetEntry)`)

// yamlMessage returns the YAML decoder's error err in the fleet file's
// words: one line, each problem with its line, an unknown key named as
// such rather than by the Go type it is not a field of.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "unmarshal errors:\n"); ok {
		lines := strings.Split(rest, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimSpace(l)
		}
		msg = strings.Join(lines, "; ")
	}
	return unknownKey.ReplaceAllStringFunc(msg, func(m string) string {
		sub := unknownKey.FindStringSubmatch(m)
		switch sub[2] {
		case "file":
			return "unknown key " + sub[1] + " (a fleet file has vms and scaleSets)"
		case "scaleSetEntry":
			return "unknown key " + sub[1] + " of a scale set"
		}
		return "unknown key " + sub[1] + " of a VM"
	})
}
