package fleetfile

// DecodePaths decodes data on the fast paths and with the YAML decoder,
// for the tests that check that they read a document alike: fast is the
// JSON fast path's or the line reader's, and path says which read data
// ("json", "lines" or "").
func DecodePaths(data []byte) (fast, slow any, path string, slowErr error) {
	var a, b file
	switch {
	case decodeJSON(data, &a):
		path = "json"
	case decodeLines(data, &a, nil):
		// As Parse reads them: the VMs handed over one by one, in an
		// entry the reader reuses.
		var streamed file
		var vms []vmEntry
		if !decodeLines(data, &streamed, func(e *vmEntry) { vms = append(vms, *e) }) {
			panic("decodeLines read a document whole but not entry by entry")
		}
		if streamed.VMs == nil {
			streamed.VMs = vms
		}
		a, path = streamed, "lines"
	}
	slowErr = decodeYAML(data, &b)
	return a, b, path, slowErr
}
