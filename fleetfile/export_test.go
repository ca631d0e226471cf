package fleetfile

// DecodePaths decodes data on the JSON fast path and with the YAML
// decoder, for the tests that check that the two read a document alike.
func DecodePaths(data []byte) (fast, slow any, fastOK bool, slowErr error) {
	var a, b file
	fastOK = decodeJSON(data, &a)
	slowErr = decodeYAML(data, &b)
	return a, b, fastOK, slowErr
}
