package daemon

import (
	"os/exec"
	"syscall"
)

// Kill ends cmd's process with SIGKILL and, when it leads its own process group (started with Setsid or
// Setpgid), every other process still in that group: what a tool forked (initdb's bootstrap backend,
// pg_dump's workers) must not outlive it and keep writing. A daemon that left the group (a postmaster
// started by pg_ctl runs in a session of its own) is not touched.
func Kill(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if a := cmd.SysProcAttr; a != nil && (a.Setsid || a.Setpgid) {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err == nil {
			return nil
		}
	}
	return cmd.Process.Kill()
}
