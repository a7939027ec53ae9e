package peer

import "syscall"

// yieldCPU gives the calling thread's CPU to another runnable thread, if
// there is one (sched_yield(2)), or calls the tests' hook instead. A raw
// system call: the runtime is not told, so the thread keeps its processor
// through the yield instead of the monitor handing it to another thread
// (and the thread waiting for one when it comes back).
func yieldCPU() {
	if f := yieldHook.Load(); f != nil {
		(*f)()
		return
	}
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
