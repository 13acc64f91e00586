package tap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The mark kbridge leaves in its TAP's alias names this live process; a
// mark of a gone pid, a reused pid (another start time) or a zombie is
// dead; an alias that is no mark is not read as one.
func TestMarkedOwner(t *testing.T) {
	pid, alive, ok := markedOwner(ownerAlias())
	if !ok || !alive || pid != os.Getpid() {
		t.Fatalf("own mark %q: pid %d alive %v ok %v", ownerAlias(), pid, alive, ok)
	}
	start, _, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, alive, _ := markedOwner(fmt.Sprintf("%s%d start=%d", aliasPrefix, os.Getpid(), start+1)); alive {
		t.Error("a mark with another start time (a reused pid) counts as alive")
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if _, alive, ok := markedOwner(fmt.Sprintf("%s%d start=1", aliasPrefix, gone.Process.Pid)); !ok || alive {
		t.Errorf("a gone pid's mark: alive %v ok %v", alive, ok)
	}
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	zpid := zombie.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, st, err := procStart(zpid); err == nil && st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never became a zombie")
		}
		time.Sleep(time.Millisecond)
	}
	zstart, _, _ := procStart(zpid)
	if _, alive, _ := markedOwner(fmt.Sprintf("%s%d start=%d", aliasPrefix, zpid, zstart)); alive {
		t.Error("a zombie's mark counts as alive")
	}
	for _, a := range []string{"", "uplink", "kbridge pid=x start=1", "kbridge pid=0 start=1"} {
		if _, _, ok := markedOwner(a); ok {
			t.Errorf("alias %q read as a mark", a)
		}
	}
}

// Who may delete a TAP interface: only one no live kbridge marked, no
// queue attached by the kernel's count, no holder seen and, unmarked,
// with every process's fds read.
func TestOrphanIsDecidedOnEveryClue(t *testing.T) {
	for _, c := range []struct {
		what   string
		u      linkUse
		orphan bool
		says   string
	}{
		{"marked by a live kbridge", linkUse{markPid: 7, markAlive: true, queues: 1, holders: []int{7}, complete: true}, false, "kbridge pid 7, which still runs"},
		{"marked by a live kbridge, its command line read", linkUse{markPid: 7, markAlive: true, markCmd: "kbridge run --instance b", queues: 1, complete: false}, false, "kbridge pid 7 (kbridge run --instance b), which still runs"},
		{"held, seen", linkUse{holders: []int{9}, queues: 1, complete: true}, false, "held open by pid [9]"},
		{"held, unseen: a queue the kernel counts", linkUse{markPid: 7, queues: 2, complete: true}, false, "2 queues attached"},
		{"unmarked, the scan refused somewhere (EACCES)", linkUse{complete: false}, false, "as far as can be told"},
		{"unmarked, nobody attached, the scan complete", linkUse{complete: true}, true, ""},
		{"a dead kbridge's, nobody attached, the scan complete", linkUse{markPid: 7, complete: true}, true, ""},
		{"a dead kbridge's, nobody attached by the kernel's count, the scan refused somewhere", linkUse{markPid: 7, complete: false}, true, ""},
	} {
		err := c.u.orphan("kbx0")
		switch {
		case c.orphan && err != nil:
			t.Errorf("%s: %v, want it removable", c.what, err)
		case !c.orphan && (!errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v, want ErrInUse saying %q", c.what, err, c.says)
		}
	}
}

// A process's fds that cannot be read (here a loop where an fd's target
// should be; the kernel's EACCES for a process with more capabilities) make
// the scan unsure; fds that vanished meanwhile (dangling) do not; a TUN fd
// whose fdinfo names the interface is a holder.
func TestHoldsTellsRefusedFromGone(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun: ", err)
	}
	proc := func(t *testing.T, fds map[string]string, iff string) string {
		dir := t.TempDir()
		for _, sub := range []string{"fd", "fdinfo"} {
			if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for n, target := range fds {
			if target == "loop" {
				target = filepath.Join(dir, "fd", n)
			}
			if err := os.Symlink(target, filepath.Join(dir, "fd", n)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "fdinfo", n), []byte("pos:\t0\niff:\t"+iff+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, c := range []struct {
		what       string
		fds        map[string]string
		iff        string
		held, sure bool
	}{
		{"a TUN fd on the interface", map[string]string{"3": "/dev/null", "4": "/dev/net/tun"}, "kbx0", true, true},
		{"a TUN fd on another interface", map[string]string{"4": "/dev/net/tun"}, "other", false, true},
		{"an fd gone meanwhile", map[string]string{"3": "/nonexistent/gone"}, "kbx0", false, true},
		{"an fd that cannot be read", map[string]string{"3": "loop"}, "kbx0", false, false},
	} {
		held, sure := holds(proc(t, c.fds, c.iff), "kbx0")
		if held != c.held || sure != c.sure {
			t.Errorf("%s: held %v sure %v, want %v %v", c.what, held, sure, c.held, c.sure)
		}
	}
	if held, sure := holds(filepath.Join(t.TempDir(), "gone"), "kbx0"); held || !sure {
		t.Errorf("a process gone meanwhile: held %v sure %v, want false true", held, sure)
	}
}
