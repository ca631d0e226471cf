package fleetfile

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"
)

// isoUnits are the designators ParseISODuration accepts, in the order
// they must appear: D before the T, then H, M and S after it.
var isoUnits = []struct {
	des  byte
	time bool // after the T
	unit time.Duration
}{
	{'D', false, 24 * time.Hour},
	{'H', true, time.Hour},
	{'M', true, time.Minute},
	{'S', true, time.Second},
}

// ParseISODuration parses an ISO 8601 duration of the form PnDTnHnMnS,
// such as PT5M, PT300S, PT0.5H, P1D or P1DT2H. Each component is an
// integer or a decimal (with '.' or ','); as ISO 8601 requires, only the
// last component may have a fraction. Years, months and weeks, which
// have no fixed length, are refused, as are signs, empty durations (P,
// PT), repeated or misordered designators and durations that do not fit
// a time.Duration. A fraction of a nanosecond is dropped.
func ParseISODuration(s string) (time.Duration, error) {
	d, err := parseISODuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration: %w", s, err)
	}
	return d, nil
}

func parseISODuration(s string) (time.Duration, error) {
	switch {
	case s == "":
		return 0, errors.New("it is empty")
	case s[0] == '-' || s[0] == '+':
		return 0, errors.New("it has a sign; only positive durations are allowed")
	case s[0] != 'P':
		return 0, errors.New("it does not start with P")
	}
	rest := s[1:]
	var (
		total    big.Rat
		next     int     // index into isoUnits of the first designator still allowed
		seen     [4]bool // by index into isoUnits
		inTime   bool    // after the T
		have     bool    // a component since P or T
		fraction string  // the component with a fraction, if any
	)
	for rest != "" {
		if rest[0] == 'T' {
			switch {
			case inTime:
				return 0, errors.New("T is repeated")
			case fraction != "":
				return 0, fmt.Errorf("only the last component may have a fraction, not %s", fraction)
			}
			inTime, have = true, false
			rest = rest[1:]
			continue
		}
		n := 0
		for n < len(rest) && (rest[n] >= '0' && rest[n] <= '9' || rest[n] == '.' || rest[n] == ',') {
			n++
		}
		num := rest[:n]
		if n == len(rest) {
			return 0, fmt.Errorf("number %s has no designator", num)
		}
		des, size := utf8.DecodeRuneInString(rest[n:])
		rest = rest[n+size:]
		switch {
		case num == "" && (des == '-' || des == '+'):
			return 0, errors.New("a component has a sign; only positive durations are allowed")
		case num == "":
			return 0, fmt.Errorf("designator %q has no number", string(des))
		case des == 'T':
			return 0, fmt.Errorf("number %s has no designator", num)
		}
		if !isDecimal(num) {
			return 0, fmt.Errorf("%s is not an integer or decimal number", num)
		}
		u := -1
		for i, iu := range isoUnits {
			if rune(iu.des) == des && iu.time == inTime {
				u = i
			}
		}
		if u < 0 {
			return 0, badDesignator(des, inTime)
		}
		if u < next {
			if seen[u] {
				return 0, fmt.Errorf("designator %c is repeated", des)
			}
			return 0, fmt.Errorf("designator %c comes after %c; the order is D, T, H, M, S", des, isoUnits[next-1].des)
		}
		if fraction != "" {
			return 0, fmt.Errorf("only the last component may have a fraction, not %s", fraction)
		}
		if strings.ContainsAny(num, ".,") {
			fraction = num + string(des)
		}
		var v big.Rat
		v.SetString(strings.Replace(num, ",", ".", 1))
		v.Mul(&v, new(big.Rat).SetInt64(int64(isoUnits[u].unit)))
		total.Add(&total, &v)
		next, have, seen[u] = u+1, true, true
	}
	if !have {
		if inTime {
			return 0, errors.New("it has no component after T")
		}
		return 0, errors.New("it has no component")
	}
	ns := new(big.Int).Quo(total.Num(), total.Denom())
	if !ns.IsInt64() {
		return 0, errors.New("it is too long")
	}
	return time.Duration(ns.Int64()), nil
}

// isDecimal reports whether num is digits, optionally followed by one
// decimal sign and more digits.
func isDecimal(num string) bool {
	whole, frac, hasFrac := strings.Cut(strings.Replace(num, ",", ".", 1), ".")
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	return digits(whole) && (!hasFrac || digits(frac))
}

func badDesignator(des rune, inTime bool) error {
	switch {
	case des == 'D' && inTime:
		return errors.New("designator D must come before T")
	case (des == 'H' || des == 'S') && !inTime:
		return fmt.Errorf("designator %c must come after T", des)
	case des == 'Y' && !inTime, des == 'M' && !inTime, des == 'W' && !inTime:
		return fmt.Errorf("designator %c is not supported: years, months and weeks are refused; use D, H, M or S (minutes are M after T)", des)
	}
	return fmt.Errorf("designator %q is unknown; use D, or H, M or S after T", string(des))
}
