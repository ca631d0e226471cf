package admin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/internal/echo"
)

// What the operator API's error messages show of the values a caller
// sent: a request's values can be as long as its body (16 MiB), and an
// answer that quotes one whole is as large, for nothing.

// maxMessage bounds an error message, whatever layer wrote it: the
// engine and the vocabulary quote the values they are given too.
const maxMessage = 1024

// quote returns s Go-quoted for an error message. A value longer than
// echo.Max bytes is cut at a character boundary, and the cut is marked
// with its length: "1111111…"… (16777216 bytes).
func quote(s string) string {
	if len(s) <= echo.Max {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:echo.Cut(s, echo.Max)]), len(s))
}

// clip returns s for an error message unquoted, as a path or a method is
// shown, cut like quote's values.
func clip(s string) string {
	if len(s) <= echo.Max {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:echo.Cut(s, echo.Max)], len(s))
}

// shorten returns err with every Go-quoted occurrence of the long values
// among vals in its message replaced by the value as quote shows it: for
// errors of the engine and the vocabulary, which quote what they are
// given whole. Other errors are returned as they are.
func shorten(err error, vals ...string) error {
	var fe *forewarn.Error
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	msg := shortened(fe.Message, vals...)
	if msg == fe.Message {
		return err
	}
	short := &forewarn.Error{Code: fe.Code, Message: msg}
	var se *statusError
	if errors.As(err, &se) {
		return &statusError{status: se.status, err: short}
	}
	return short
}

// shortened returns msg with every Go-quoted occurrence of the long
// values among vals replaced by the value as quote shows it.
func shortened(msg string, vals ...string) string {
	for _, v := range vals {
		if len(v) > echo.Max {
			msg = strings.ReplaceAll(msg, strconv.Quote(v), quote(v))
		}
	}
	return msg
}

// capMessage bounds msg to maxMessage bytes, marking a cut with "…".
func capMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	return msg[:echo.Cut(msg, maxMessage)] + "…"
}
