package peer

import "syscall"

// yieldCPU gives the calling thread's CPU to another runnable thread, if
// there is one (sched_yield(2)), or calls the tests' hook instead.
func yieldCPU() {
	if f := yieldHook.Load(); f != nil {
		(*f)()
		return
	}
	syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
