//go:build !unix

package agent

import "os/exec"

// setProcessGroup leaves cmd as it is: without process groups only the
// command itself is killed on cancellation.
func setProcessGroup(cmd *exec.Cmd) {}
