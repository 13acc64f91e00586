// Command unitprobe stands in for kbridge when deploy/nspawn-check.sh
// tests deploy/kbridge.service under a real systemd. It exercises what
// the unit's sandbox must allow (the TAP clone device, hugetlbfs, the
// DPDK runtime directory, CPU affinity) and what it must deny (writes to
// /etc and /usr), then speaks sd_notify from the main PID as the daemon
// does. Any surprise makes "run" exit 1, so the start fails loudly.
//
//	go build -o /tmp/unitprobe ./deploy/unitprobe
//	deploy/nspawn-check.sh /tmp/unitprobe
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const tapName = "kb0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "cleanup" {
		if err := tap(tapName, false); err != nil {
			fmt.Fprintln(os.Stderr, "unitprobe: cleanup:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "unitprobe: cleanup removed", tapName)
		return
	}
	ok := true
	expect := func(what string, err error, allowed bool) {
		switch {
		case allowed && err == nil, !allowed && err != nil:
			fmt.Fprintf(os.Stderr, "unitprobe: %s: as expected (%v)\n", what, errOrOK(err))
		default:
			ok = false
			fmt.Fprintf(os.Stderr, "unitprobe: %s: UNEXPECTED (%v)\n", what, errOrOK(err))
		}
	}
	expect("persistent TAP through /dev/net/tun", tap(tapName, true), true)
	expect("create a file in /dev/hugepages", touch("/dev/hugepages/unitprobe"), true)
	expect("create a file in /run/dpdk", touch("/run/dpdk/unitprobe"), true)
	expect("create a file in /run/kbridge (control socket)", touch("/run/kbridge/unitprobe"), true)
	expect("write elsewhere under /run", touch("/run/unitprobe"), false)
	expect("pin to CPU 0", pin(0), true)
	expect("write under /etc", touch("/etc/unitprobe"), false)
	expect("write under /usr", touch("/usr/unitprobe"), false)
	if !ok {
		os.Exit(1)
	}
	if err := notify("READY=1\nSTATUS=unitprobe: sandbox as expected, " + tapName + " up"); err != nil {
		fmt.Fprintln(os.Stderr, "unitprobe:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-sig:
			fmt.Fprintln(os.Stderr, "unitprobe: stopping on", s)
			_ = notify("STOPPING=1")
			return
		case <-tick.C:
			_ = notify("WATCHDOG=1")
		}
	}
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// notify sends one sd_notify datagram. systemd only accepts it from the
// main PID under NotifyAccess=main, which is why this is not a
// systemd-notify child process.
func notify(msg string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return errors.New("NOTIFY_SOCKET not set: not started by systemd with Type=notify")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// tap creates (persist) or deletes a persistent TAP device.
func tap(name string, persist bool) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("ifreq %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	p := 0
	if persist {
		p = 1
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETPERSIST, uintptr(p)); e != 0 {
		return fmt.Errorf("TUNSETPERSIST %s: %w", name, e)
	}
	return nil
}

func touch(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
