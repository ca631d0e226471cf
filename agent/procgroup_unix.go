//go:build unix

package agent

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs cmd in a process group of its own and makes its
// cancellation kill the whole group, so that a timed-out handler's
// children die with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
