package forewarn

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Error codes shared by every layer. HTTP handlers map them to status
// codes in one place each; clients never see internal error text.
const (
	// EINVALID: the request is malformed or breaks a rule.
	EINVALID = "invalid"
	// ENOTFOUND: the named event or VM does not exist.
	ENOTFOUND = "not_found"
	// ECONFLICT: the request does not fit the current state, or a store
	// write lost a compare-and-swap race.
	ECONFLICT = "conflict"
	// EPRECONDITION: the request was computed against a version of the
	// state (an If-Match revision) that is no longer current.
	EPRECONDITION = "precondition_failed"
	// EFORBIDDEN: the caller may not see or do this.
	EFORBIDDEN = "forbidden"
	// EUNAUTHORIZED: the caller did not prove who it is (a missing or
	// wrong operator token).
	EUNAUTHORIZED = "unauthorized"
	// EUNAVAILABLE: the service is shutting down or its store is closed.
	EUNAVAILABLE = "unavailable"
	// ENOSPACE: the server's disk is full (or its quota used up), so a
	// change could not be recorded, and was not made.
	ENOSPACE = "insufficient_storage"
	// EINTERNAL: anything else; the message is not shown to clients.
	EINTERNAL = "internal"
)

// Error is an application error with a machine-readable code and a
// message fit for the person who made the request.
type Error struct {
	Code    string
	Message string
}

// Error implements the error interface.
func (e *Error) Error() string { return fmt.Sprintf("forewarn: %s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain,
// EINTERNAL for any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain,
// and a generic text for any other error so internals do not leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// NoSpace reports whether err is a write's failure for want of disk
// space: ENOSPC, or EDQUOT for a used-up quota, however wrapped. bbolt
// reports a failure to grow its file with the errno's text only ("file
// resize error: no space left on device"), so the text counts too.
func NoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), syscall.ENOSPC.Error()) || strings.Contains(err.Error(), syscall.EDQUOT.Error())
}
