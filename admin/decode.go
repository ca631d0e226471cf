package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
)

// How request bodies are read. A body is read at a cost that follows
// what it may hold, not what it is: the JSON decoder reads one value
// whole before it decodes it, and a 16 MiB body read at once cost 67 MB
// (a long string) to 629 MB (a list of one-letter names). A create's
// body, the only large one (its VM names), is read token by
// token: each value at most maxValueBytes, and the names only while they
// are names of the fleet's VMs, each once (so no more than the fleet
// has). Other bodies are small and are read whole, up to maxSmallBody.

// MaxBodyBytes is the largest create body (POST /v1/events) the server
// reads; a larger one is refused with 413 Request Entity Too Large. It
// admits one event naming every VM of a 100,000-VM fleet, even with
// 64-character names (about 6.7 MB).
const MaxBodyBytes = 16 << 20

// maxSmallBody is the largest body of the other writes.
const maxSmallBody = 64 << 10

// maxValueBytes bounds each value of a create's body (a description,
// say), and the space before it.
const maxValueBytes = 64 << 10

// tooLarge refuses a body over limit bytes.
func tooLarge(limit int64) error {
	return &statusError{
		status: http.StatusRequestEntityTooLarge,
		err:    forewarn.Errorf(forewarn.EINVALID, "request body is larger than %d bytes", limit),
	}
}

// decode reads r's JSON body into v, strictly: unknown fields, values of
// the wrong type, trailing data and bodies over maxSmallBody are refused.
// An empty body leaves v alone when optional, and is an error otherwise.
// It is for the small bodies: a create's is read by decodeCreate.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if r.ContentLength > maxSmallBody {
		return tooLarge(maxSmallBody)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSmallBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Exactly one value: anything but the end of the body is an error.
		if err = dec.Decode(&json.RawMessage{}); err == nil {
			return forewarn.Errorf(forewarn.EINVALID, "malformed JSON: unexpected data after the request object")
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
	if errors.Is(err, io.EOF) && optional {
		return nil
	}
	return decodeError(err)
}

// decodeError turns a JSON decoding or body reading error into an
// EINVALID error whose message names the problem.
func decodeError(err error) error {
	var (
		syntax    *json.SyntaxError
		typ       *json.UnmarshalTypeError
		overLimit *http.MaxBytesError
	)
	switch {
	case errors.As(err, &overLimit):
		return tooLarge(overLimit.Limit)
	case errors.Is(err, io.EOF):
		return forewarn.Errorf(forewarn.EINVALID, "missing request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return forewarn.Errorf(forewarn.EINVALID, "malformed JSON: unexpected end of the body")
	case errors.As(err, &syntax):
		return forewarn.Errorf(forewarn.EINVALID, "malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return forewarn.Errorf(forewarn.EINVALID, "request body must be a JSON object, not %s", typ.Value)
		}
		// A number's Value holds the number as it was sent.
		return forewarn.Errorf(forewarn.EINVALID, "field %q must be %s, not %s", typ.Field, jsonKind(typ.Type.String()), clip(typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for DisallowUnknownFields;
		// its message quotes the field's name with %q.
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		if uerr != nil {
			return forewarn.Errorf(forewarn.EINVALID, "unknown field")
		}
		return unknownField(name)
	}
	return forewarn.Errorf(forewarn.EINVALID, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// unknownField refuses a body's field that its request does not have.
func unknownField(name string) error {
	return forewarn.Errorf(forewarn.EINVALID, "unknown field %s", quote(name))
}

// jsonKind names the JSON kind a Go type decodes from.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case goType == "int" || goType == "*int":
		return "a whole number"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "of type " + goType
}

// createFields are the JSON names of CreateRequest's fields, read from
// its tags, so that a field added to it is read here too.
var createFields = func() []string {
	var names []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[CreateRequest]()) {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}()

// createField returns the name of CreateRequest's field that the key
// of a body's member names, as encoding/json matches them (exactly,
// else without regard to case), or "" for none.
func createField(key string) string {
	if slices.Contains(createFields, key) {
		return key
	}
	for _, f := range createFields {
		if strings.EqualFold(f, key) {
			return f
		}
	}
	return ""
}

// errValueTooLong is a value of a create's body over maxValueBytes.
var errValueTooLong = errors.New("value too long")

// valueLimit lets a JSON decoder read at most maxValueBytes past the
// position allow was last given, so that no value it reads (nor the
// space before it) is larger.
type valueLimit struct {
	r        io.Reader
	read     int64 // bytes read so far
	max      int64 // where reading stops
	nonEmpty bool  // a token was read
}

func (l *valueLimit) Read(p []byte) (int, error) {
	room := l.max - l.read
	if room <= 0 {
		return 0, errValueTooLong
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// allow lets dec read the next value, from where it is.
func (l *valueLimit) allow(dec *json.Decoder) { l.max = dec.InputOffset() + maxValueBytes }

// token returns dec's next token, read within the limit.
func (l *valueLimit) token(dec *json.Decoder, field string) (json.Token, error) {
	l.allow(dec)
	tok, err := dec.Token()
	if err != nil {
		return nil, l.error(dec, err, field, true)
	}
	l.nonEmpty = true
	return tok, nil
}

// error turns an error dec met reading the value of field ("" for
// none), in its Token when token is set, into the refusal to answer.
func (l *valueLimit) error(dec *json.Decoder, err error, field string, token bool) error {
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, errValueTooLong) && field == "":
		return forewarn.Errorf(forewarn.EINVALID, "the request body holds a value longer than %d bytes", maxValueBytes)
	case errors.Is(err, errValueTooLong):
		return forewarn.Errorf(forewarn.EINVALID, "field %q holds a value longer than %d bytes", field, maxValueBytes)
	case errors.Is(err, io.EOF) && l.nonEmpty:
		// Token reports the end of the body in the middle of a value as
		// EOF.
		return decodeError(io.ErrUnexpectedEOF)
	case errors.As(err, &syntax):
		return syntaxError(dec, syntax, token)
	}
	return decodeError(err)
}

// syntaxError returns the refusal of a body in which dec met the syntax
// error err, in its Token when token is set, naming its position as
// decode does, from 1. A decoder reading token by token does not know
// it: the position of an error within a value is the count of the bytes
// its values took so far, and that of an unexpected character between
// values (which Token reports) counts from 0. The value that failed is
// still in dec's buffer, so reading it again places an error within it.
func syntaxError(dec *json.Decoder, err *json.SyntaxError, token bool) error {
	at, msg := err.Offset+1, err.Error()
	var again *json.SyntaxError
	if errors.As(json.NewDecoder(dec.Buffered()).Decode(&json.RawMessage{}), &again) && (!token || again.Offset > 1) {
		// Token says more of a character that starts no value: what it
		// expected instead.
		at, msg = dec.InputOffset()+again.Offset, again.Error()
	} else if rest, _ := io.ReadAll(dec.Buffered()); msg == "expected colon after object key" && len(rest) > 0 {
		// What Decode says where Token would say which character.
		msg = "invalid character " + quoteChar(rest[0]) + " after object key"
	}
	return forewarn.Errorf(forewarn.EINVALID, "malformed JSON at byte %d: %s", at, msg)
}

// quoteChar quotes c as encoding/json's syntax errors do.
func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	q := strconv.Quote(string(c))
	return "'" + q[1:len(q)-1] + "'"
}

// decodeCreate reads r's body, a CreateRequest, into req, as decode
// reads a body (strictly: unknown fields, values of the wrong type and
// trailing data are refused), but token by token: it refuses a field
// given twice, a value longer than maxValueBytes, and in the vms list a
// name of no VM, a VM named twice, or more VMs than the fleet has, as it
// meets them, and never holds more of the body than one value and the
// list of names.
func (s *Server) decodeCreate(w http.ResponseWriter, r *http.Request, req *CreateRequest) error {
	if r.ContentLength > MaxBodyBytes {
		return tooLarge(MaxBodyBytes)
	}
	lim := &valueLimit{r: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}
	dec := json.NewDecoder(lim)
	tok, err := lim.token(dec, "")
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return forewarn.Errorf(forewarn.EINVALID, "request body must be a JSON object, not %s", tokenKind(tok))
	}
	fields := map[string]json.RawMessage{} // the other fields' values
	seen := map[string]bool{}
	for dec.More() {
		tok, err := lim.token(dec, "")
		if err != nil {
			return err
		}
		key, _ := tok.(string) // a member's name is a string, or Token fails
		field := createField(key)
		switch {
		case field == "":
			return unknownField(key)
		case seen[field]:
			// encoding/json would take the last; a body of one field a
			// million times would be read to its end.
			return forewarn.Errorf(forewarn.EINVALID, "field %q is given twice", field)
		}
		seen[field] = true
		if field == "vms" {
			if req.VMs, err = s.decodeNames(dec, lim); err != nil {
				return err
			}
			continue
		}
		lim.allow(dec)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return lim.error(dec, err, field, false)
		}
		fields[field] = raw
	}
	if _, err := lim.token(dec, ""); err != nil { // the object's end
		return err
	}
	// The other fields, each at most maxValueBytes, as decode reads them.
	var rest bytes.Buffer
	rest.WriteByte('{')
	for _, f := range createFields {
		if raw, ok := fields[f]; ok {
			if rest.Len() > 1 {
				rest.WriteByte(',')
			}
			rest.WriteString(strconv.Quote(f) + ":")
			rest.Write(raw)
		}
	}
	rest.WriteByte('}')
	d := json.NewDecoder(&rest) // rest holds known fields only
	if err := d.Decode(req); err != nil {
		return decodeError(err)
	}
	// Exactly one value: anything but the end of the body is an error.
	lim.allow(dec)
	if err := dec.Decode(&json.RawMessage{}); err == nil {
		return forewarn.Errorf(forewarn.EINVALID, "malformed JSON: unexpected data after the request object")
	} else if !errors.Is(err, io.EOF) {
		return lim.error(dec, err, "", false)
	}
	return nil
}

// decodeNames reads the value of a create's vms field: null, or an
// array of names of the VMs of the fleet in force, each at most once. It refuses an
// unknown name or a name given twice as it meets it, as the engine
// would, so that a list of the same name, or of made-up ones, is not read
// to its end; and a list longer than the fleet, which would repeat one.
// The names it returns are the fleet's own strings.
func (s *Server) decodeNames(dec *json.Decoder, lim *valueLimit) ([]string, error) {
	tok, err := lim.token(dec, "vms")
	if err != nil {
		return nil, err
	}
	switch tok {
	case nil:
		return nil, nil
	case json.Delim('['):
	default:
		return nil, forewarn.Errorf(forewarn.EINVALID, "field %q must be %s, not %s", "vms", jsonKind("[]string"), tokenKind(tok))
	}
	maxNames, _, _ := s.eng.FleetCounts()
	names := []string{}
	named := map[string]bool{} // bounded by maxNames, like names
	for dec.More() {
		if len(names) == maxNames {
			return nil, forewarn.Errorf(forewarn.EINVALID, "field %q names more VMs than the fleet's %d", "vms", maxNames)
		}
		lim.allow(dec)
		var name string
		if err := dec.Decode(&name); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				return nil, forewarn.Errorf(forewarn.EINVALID, "field %q must be %s, not %s", "vms", jsonKind("string"), clip(typ.Value))
			}
			return nil, lim.error(dec, err, "vms", false)
		}
		vm := s.eng.VMNamed(name)
		if vm == nil {
			return nil, forewarn.Errorf(forewarn.ENOTFOUND, "unknown VM %s", quote(name))
		}
		if named[vm.Name] {
			return nil, forewarn.Errorf(forewarn.EINVALID, "VM %s is named twice", quote(name))
		}
		named[vm.Name] = true
		names = append(names, vm.Name)
	}
	if _, err := lim.token(dec, "vms"); err != nil { // the array's end
		return nil, err
	}
	return names, nil
}

// tokenKind names the JSON kind of a token that starts a value.
func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	if tok == json.Delim('[') {
		return "array"
	}
	return "object"
}
