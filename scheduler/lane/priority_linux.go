package lane

import "syscall"

// threadNice is the lane threads' nice value: below the API's threads (0) for the kernel's scheduler, but
// not idle (background work still gets about a tenth of a busy core against one API thread). Raising a
// thread's nice needs no privilege (lowering it back would: the lane's threads never go back).
const threadNice = 10

// lowerThreadPriority lowers the calling thread's priority (Linux schedules threads, and setpriority
// with a thread ID sets that thread's nice value alone).
func lowerThreadPriority() {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), threadNice)
}
