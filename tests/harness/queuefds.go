package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// QueueFds copies the TAP queue fds of interface ifname that process pid
// holds into this process (pidfd_getfd), in fd order: a holder standing in
// for systemd's fd store.
func QueueFds(t *testing.T, pid int, ifname string) []*os.File {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/fdinfo", pid), e.Name()))
		if err != nil || !strings.Contains(string(b), "iff:\t"+ifname+"\n") {
			continue
		}
		n, _ := strconv.Atoi(e.Name())
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			t.Skipf("pidfd_getfd: %v", err)
		}
		files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("queue fd %d of pid %d", n, pid)))
	}
	if len(files) == 0 {
		t.Fatalf("pid %d holds no queue of %s", pid, ifname)
	}
	return files
}
