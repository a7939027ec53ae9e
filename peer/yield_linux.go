package peer

import "syscall"

// schedYield is sched_yield(2). A raw system call: the runtime is not
// told, so the thread keeps its processor through the yield instead of the
// monitor handing it to another thread (and the thread waiting for one
// when it comes back).
func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
