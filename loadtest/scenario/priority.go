package scenario

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// SetNice sets the niceness of every thread of this process. Linux keeps
// niceness per thread and new threads and child processes inherit it from
// the thread that creates them, so after this call everything the harness
// starts (generator, DNS servers, the testbed) runs at nice: -20 (as
// root) keeps the other work on a shared machine from delaying the
// measured processes, alike for every design.
func SetNice(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("nice %d: %w", nice, err)
		}
	}
	return nil
}
