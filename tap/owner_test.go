package tap

import (
	"fmt"
	"os"
	"os/exec"
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
