package scenario

import (
	"encoding/xml"
	"fmt"
)

// junitSuites is the JUnit XML CI systems read.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// JUnit returns the result as the JUnit XML CI systems read: one
// testsuite named after the scenario, one testcase per Check, a failed
// one with its Message as the failure's message and its Evidence as the
// failure's text.
func (r *Result) JUnit() ([]byte, error) {
	s := junitSuite{Name: r.Name, Tests: len(r.Checks), Time: fmt.Sprintf("%.3f", r.Ended.Sub(r.Started).Seconds())}
	for _, res := range r.Checks {
		c := junitCase{Name: res.Name, Classname: r.Name}
		if res.Failed {
			s.Failures++
			c.Failure = &junitFailure{Message: res.Message, Body: res.Evidence}
		}
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(junitSuites{Tests: s.Tests, Failures: s.Failures, Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode JUnit XML: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}
