package witnesstest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the witness if the test process dies
// before its cleanups run (a test timeout's panic, a signal).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
