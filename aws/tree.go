package aws

import (
	"slices"
	"strings"
	"sync/atomic"
)

// versions are the metadata versions EC2 serves, oldest first: GET /
// lists them, then latest, which serves the newest (docs/aws-wire.md,
// section 3).
var versions = [...]string{
	"1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10", "2007-12-15", "2008-02-01", "2008-09-01",
	"2009-04-04", "2011-01-01", "2011-05-01", "2012-01-12", "2014-02-25", "2014-11-05", "2015-10-20",
	"2016-04-19", "2016-06-30", "2016-09-02", "2018-03-28", "2018-08-17", "2018-09-24", "2019-10-01",
	"2020-10-27", "2021-01-03", "2021-03-23", "2021-07-15", "2022-09-24", "2024-04-11",
}

// version indexes versions.
type version uint8

// latest is the version /latest/ serves: the newest.
const latest = version(len(versions) - 1)

// versionOf returns the version a path's first segment names, and
// false when it names none.
func versionOf(seg string) (version, bool) {
	if seg == "latest" {
		return latest, true
	}
	i, ok := slices.BinarySearch(versions[:], seg) // 1.0 and the dates sort as strings
	return version(i), ok
}

// split returns the version p's first segment names, after any leading
// slashes, and the rest of p below it; ok is false when p names no version.
func split(p string) (v version, key string, ok bool) {
	seg, key, _ := strings.Cut(strings.TrimLeft(p, "/"), "/")
	v, ok = versionOf(seg)
	return v, key, ok
}

// IsPath reports whether p is a path of the EC2 API: latest, or a version
// it serves, and anything below, however many slashes lead it (EC2 reads
// //latest/ as /latest/). / is not one: every API answers it.
func IsPath(p string) bool {
	_, _, ok := split(p)
	return ok
}

// since returns the first version that serves a key EC2 released on
// date (a version date or "1.0"): the first version dated on or after it.
func since(date string) version {
	i, _ := slices.BinarySearch(versions[:], date)
	return version(i)
}

// The version each key appeared in, from the release dates of EC2's
// list of metadata categories (docs/aws-wire.md, section 3). Keys
// unnamed here are in 1.0.
var (
	sinceLocalHostname  = since("2007-01-19")
	sinceInstanceType   = since("2007-08-29")
	sinceBlockDevices   = since("2007-12-15")
	sinceZone           = since("2008-02-01")
	sinceDynamic        = since("2009-04-04")
	sinceNetwork        = since("2011-01-01") // mac and network/
	sinceDomain         = since("2014-02-25")
	sinceTermination    = since("2014-11-05")
	sincePartition      = since("2015-10-20")
	sinceInstanceAction = since("2016-11-15")
	sinceEvents         = since("2018-08-17")
	sinceLifeCycle      = since("2019-10-01")
	sinceRegion         = since("2020-08-24")
	sinceRebalance      = since("2020-11-04")
	sinceAutoscaling    = since("2022-03-10")
)

// flags are what of a VM's state its listings depend on.
type flags uint8

const (
	inGroup        flags = 1 << iota // an Auto Scaling group member
	hasAction                        // spot/instance-action is set
	hasTermination                   // spot/termination-time is set
	hasRebalance                     // a rebalance is recommended
	allFlags
)

// dir is a directory below a version: its path there (with its final
// slash) and the names it may list. At a version it lists, for a VM, the
// names whose key answers (a subdirectory answers while it lists
// something). Whether a key answers depends only on the version and the
// VM's flags, so each listing is made once, on its first request, and
// shared by every VM with the same flags.
type dir struct {
	path  string
	names []string
	cache [len(versions)][allFlags]atomic.Pointer[[]byte]
}

// newDir returns the directory at path listing names.
func newDir(path string, names ...string) *dir { return &dir{path: path, names: names} }

// list returns dr's listing at v for d, or nil when it lists nothing (a
// 404).
func (dr *dir) list(d *doc, v version) []byte {
	p := &dr.cache[v][d.flags]
	if b := p.Load(); b != nil {
		return *b
	}
	var names []string
	for _, name := range dr.names {
		if d.key(dr.path+strings.TrimSuffix(name, "/"), v) != nil {
			names = append(names, name)
		}
	}
	var b []byte
	if len(names) > 0 {
		b = listing(names)
	}
	p.Store(&b)
	return b
}

// The directories, each listing its names in EC2's alphabetical order.
var (
	versionDir     = newDir("", "dynamic", "meta-data")
	dynamicDir     = newDir("dynamic/", "instance-identity/")
	identityDir    = newDir("dynamic/instance-identity/", "document", "pkcs7", "signature")
	autoscalingDir = newDir("meta-data/autoscaling/", "target-lifecycle-state")
	devicesDir     = newDir("meta-data/block-device-mapping/", "ami", "root")
	eventsDir      = newDir("meta-data/events/", "maintenance/", "recommendations/")
	maintenanceDir = newDir("meta-data/events/maintenance/", "history", "scheduled")
	recommendDir   = newDir("meta-data/events/recommendations/", "rebalance")
	networkDir     = newDir("meta-data/network/", "interfaces/")
	interfacesDir  = newDir("meta-data/network/interfaces/", "macs/")
	placementDir   = newDir("meta-data/placement/", "availability-zone", "region")
	servicesDir    = newDir("meta-data/services/", "domain", "partition")
	spotDir        = newDir("meta-data/spot/", "instance-action", "termination-time")
	metaDataDir    = newDir("meta-data/",
		"ami-id", "ami-launch-index", "autoscaling/", "block-device-mapping/", "events/", "hostname",
		"instance-id", "instance-life-cycle", "instance-type", "local-hostname", "local-ipv4", "mac",
		"network/", "placement/", "reservation-id", "security-groups", "services/", "spot/")
	// interfaceKeys are the keys of network/interfaces/macs/<mac>/, all
	// of version 2011-01-01.
	interfaceKeys = listing([]string{"device-number", "interface-id", "local-hostname", "local-ipv4s", "mac", "owner-id",
		"security-groups", "subnet-id", "vpc-id"})
)

// lsRoot lists the versions, then latest.
var lsRoot = listing(append(versions[:len(versions):len(versions)], "latest"))

// lookup returns the answer to path in d, or nil for 404: the version
// list at /, and below a version the keys it has. A directory answers
// with or without its final slash.
func lookup(d *doc, path string) []byte {
	if path == "/" {
		return lsRoot
	}
	v, key, ok := split(path)
	if !ok {
		return nil
	}
	return d.key(strings.TrimSuffix(key, "/"), v)
}

// at returns b when version v has a key that appeared in version from.
func at(v, from version, b []byte) []byte {
	if v < from {
		return nil
	}
	return b
}

// defKeys are the keys whose answers follow from the VM's definition
// alone: each its static answer and the version it appeared in.
var defKeys = map[string]struct {
	f     field
	since version
}{
	"dynamic/instance-identity/document":    {fIdentity, sinceDynamic},
	"meta-data/ami-id":                      {fAMIID, 0},
	"meta-data/hostname":                    {fHostname, 0},
	"meta-data/local-hostname":              {fHostname, sinceLocalHostname},
	"meta-data/instance-id":                 {fInstanceID, 0},
	"meta-data/instance-life-cycle":         {fLifeCycle, sinceLifeCycle},
	"meta-data/instance-type":               {fInstanceType, sinceInstanceType},
	"meta-data/local-ipv4":                  {fLocalIPv4, 0},
	"meta-data/mac":                         {fMAC, sinceNetwork},
	"meta-data/network/interfaces/macs":     {fMACDir, sinceNetwork},
	"meta-data/placement/availability-zone": {fZone, sinceZone},
	"meta-data/placement/region":            {fRegion, sinceRegion},
	"meta-data/reservation-id":              {fReservationID, 0},
	"meta-data/security-groups":             {fSecurityGroups, 0},
	"meta-data/services/domain":             {fDomain, sinceDomain},
	"meta-data/services/partition":          {fPartition, sincePartition},
}

// key returns the answer to key, a path below version v without a final
// slash, or nil for 404. Only the keys of the VM's definition build its
// static answers, on the first request for one.
func (d *doc) key(key string, v version) []byte {
	switch key {
	case "":
		return versionDir.list(d, v)
	case "dynamic":
		return dynamicDir.list(d, v)
	case "dynamic/instance-identity":
		return identityDir.list(d, v)
	case "dynamic/instance-identity/pkcs7":
		return at(v, sinceDynamic, d.def.static().signed().pkcs7)
	case "dynamic/instance-identity/signature":
		return at(v, sinceDynamic, d.def.static().signed().signature)
	case "meta-data":
		return metaDataDir.list(d, v)
	case "meta-data/ami-launch-index":
		return valLaunchIndex
	case "meta-data/block-device-mapping":
		return devicesDir.list(d, v)
	case "meta-data/block-device-mapping/ami", "meta-data/block-device-mapping/root":
		return at(v, sinceBlockDevices, valRootDevice)
	case "meta-data/network":
		return networkDir.list(d, v)
	case "meta-data/network/interfaces":
		return interfacesDir.list(d, v)
	case "meta-data/placement":
		return placementDir.list(d, v)
	case "meta-data/services":
		return servicesDir.list(d, v)
	case "meta-data/events":
		return eventsDir.list(d, v)
	case "meta-data/events/maintenance":
		return maintenanceDir.list(d, v)
	case "meta-data/events/maintenance/scheduled":
		return at(v, sinceEvents, d.scheduled.bytes())
	case "meta-data/events/maintenance/history":
		return at(v, sinceEvents, d.history.bytes())
	case "meta-data/events/recommendations":
		return recommendDir.list(d, v)
	case "meta-data/events/recommendations/rebalance":
		return at(v, sinceRebalance, d.rebalance)
	case "meta-data/spot":
		return spotDir.list(d, v)
	case "meta-data/spot/instance-action":
		return at(v, sinceInstanceAction, d.instanceAction)
	case "meta-data/spot/termination-time":
		return at(v, sinceTermination, d.termination)
	case "meta-data/autoscaling":
		return autoscalingDir.list(d, v)
	case "meta-data/autoscaling/target-lifecycle-state":
		return at(v, sinceAutoscaling, d.lifecycle)
	}
	if k, ok := defKeys[key]; ok {
		if v < k.since {
			return nil
		}
		return d.def.static().get(k.f)
	}
	if rest, ok := strings.CutPrefix(key, "meta-data/network/interfaces/macs/"); ok && v >= sinceNetwork {
		return d.def.static().iface(rest)
	}
	return nil
}

// iface returns the answer to key below network/interfaces/macs/: the
// VM's one interface, named by its MAC address, and its keys.
func (st *static) iface(key string) []byte {
	mac, leaf, _ := strings.Cut(key, "/")
	if mac != string(st.get(fMAC)) {
		return nil
	}
	switch leaf {
	case "":
		return interfaceKeys
	case "device-number":
		return valDeviceNumber
	case "interface-id":
		return st.get(fInterfaceID)
	case "local-hostname":
		return st.get(fHostname)
	case "local-ipv4s":
		return st.get(fLocalIPv4)
	case "mac":
		return st.get(fMAC)
	case "owner-id":
		return st.get(fAccountID)
	case "security-groups":
		return st.get(fSecurityGroups)
	case "subnet-id":
		return st.get(fSubnetID)
	case "vpc-id":
		return st.get(fVPCID)
	}
	return nil
}
