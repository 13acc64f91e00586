package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "/etc/kbridge/kbridge.yaml", "configuration `file`")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := config.Load(*path)
	if err != nil {
		return usageError{err}
	}
	if cfg.Mode == config.ModeXDP {
		return runXDP(cfg, *path, log)
	}
	notify("STATUS=joining the DPDK primary (file prefix " + cfg.DPDK.FilePrefix + ")")
	d, err := daemon.Start(cfg, log, func(s string) { notify("STATUS=" + s) })
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctlErr := make(chan error, 1)
	go func() { ctlErr <- d.ServeControl(ctx, cfg.Stats.Socket) }()
	if cfg.Stats.Metrics != "" {
		go func() { ctlErr <- d.ServeMetrics(ctx, cfg.Stats.Metrics) }()
	}
	appGone := watchPID(d.Port().AppPID())

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	changed, err := watchFile(ctx, *path)
	if err != nil {
		log.Warn("not watching the configuration file; reload with SIGHUP", "err", err)
	}
	notify("READY=1\nSTATUS=bridging " + cfg.Port + " <-> " + cfg.Interface.Name)
	dog := newWatchdog(d)
	var runErr error
loop:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(d, *path, log)
				continue
			}
			log.Info("stopping", "signal", sig.String())
			break loop
		case <-dog.tick:
			dog.check()
		case <-changed:
			log.Info("configuration file changed", "file", *path)
			reload(d, *path, log)
		case <-appGone:
			runErr = fmt.Errorf("the DPDK app (pid %d) exited: kbridge stops with it", d.Port().AppPID())
			break loop
		case err := <-ctlErr:
			if err != nil {
				runErr = err
				break loop
			}
		case <-d.Done():
			runErr = errors.New("every worker stopped")
			break loop
		}
	}
	notify("STOPPING=1")
	cancel()
	st := d.Status()
	stopErr := d.Stop()
	log.Info("stopped", "pool_in_use", d.Port().PoolInUse(), "queues", len(st.Queues))
	return errors.Join(runErr, stopErr)
}

// runXDP runs the XDP redirect path: everything moves in the kernel, so
// kbridge only attaches, reports and detaches.
func runXDP(cfg config.Config, path string, log *slog.Logger) error {
	x, err := daemon.StartXDP(cfg, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srvErr := make(chan error, 2)
	go func() { srvErr <- daemon.ServeControl(ctx, cfg.Stats.Socket, func() any { return x.Status() }) }()
	if cfg.Stats.Metrics != "" {
		go func() { srvErr <- daemon.ServeMetrics(ctx, cfg.Stats.Metrics, x.Collector()) }()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	changed, _ := watchFile(ctx, path)
	notify("READY=1\nSTATUS=steering " + x.Path.Config().NIC + " -> " + x.Path.Config().Exception)
	var runErr error
loop:
	for {
		select {
		case <-changed:
			reloadXDP(x, path, log)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reloadXDP(x, path, log)
				continue
			}
			log.Info("stopping", "signal", sig.String())
			break loop
		case err := <-srvErr:
			if err != nil {
				runErr = err
				break loop
			}
		}
	}
	notify("STOPPING=1")
	cancel()
	err = x.Path.Close()
	log.Info("stopped: xdp path detached")
	return errors.Join(runErr, err)
}

// reloadXDP applies new fast-path rules live; an invalid file changes nothing.
func reloadXDP(x *daemon.XDP, path string, log *slog.Logger) {
	cfg, err := config.Load(path)
	if err == nil && cfg.Mode != config.ModeXDP {
		err = errors.New("mode changed: restart kbridge to switch modes")
	}
	if err == nil {
		xc := cfg.XDPConfig().WithDefaults()
		err = x.Path.SetRules(xc.FastPath, xc.XSKFallback)
	}
	if err != nil {
		log.Error("reload refused, keeping the running rules", "err", err)
		return
	}
	log.Info("reloaded", "fast_path_rules", len(cfg.XDP.FastPath))
}

// reload re-reads the configuration and applies what can change live: the
// polling policy. An invalid file is refused and the old policy stays.
func reload(d *daemon.Daemon, path string, log *slog.Logger) {
	cfg, err := config.Load(path)
	if err != nil {
		log.Error("reload refused, keeping the running configuration", "err", err)
		return
	}
	old := d.Config()
	if cfg.Policy == d.Workers()[0].Policy() {
		log.Info("reload: policy unchanged", "mode", cfg.Policy.Mode)
		return
	}
	for _, w := range d.Workers() {
		if err := w.SetPolicy(cfg.Policy); err != nil {
			log.Error("reload refused", "err", err)
			return
		}
	}
	cfg.Policy = old.Policy
	if !reflect.DeepEqual(cfg, old) {
		log.Warn("reload: only policy.* changes apply live; restart kbridge for the other changes")
	}
	log.Info("reloaded", "mode", d.Workers()[0].Policy().Mode)
}

// watchFile reports changes to the file at path. It watches the directory,
// since editors and config managers replace files rather than write them in
// place, and lets a burst of events settle before it reports one change.
func watchFile(ctx context.Context, path string) (<-chan struct{}, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer w.Close()
		var settle <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) == abs && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					settle = time.After(100 * time.Millisecond)
				}
			case <-w.Errors:
			case <-settle:
				settle = nil
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// watchPID returns a channel closed when process pid exits (pidfd_open).
func watchPID(pid int) <-chan struct{} {
	gone := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return gone // unknown: never closes
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			}
			close(gone)
			return
		}
	}()
	return gone
}

// watchdog pings systemd (WATCHDOG=1) at a third of WatchdogSec while every
// worker's loop advances. A parked worker is poked and gets until the next
// tick to show it is alive; a stuck one stops the pings and systemd
// restarts the service.
type watchdog struct {
	d     *daemon.Daemon
	tick  <-chan time.Time
	beats []uint64
}

func newWatchdog(d *daemon.Daemon) *watchdog {
	w := &watchdog{d: d, beats: make([]uint64, len(d.Workers()))}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return w // tick stays nil: never fires
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return w
	}
	// A third of the period: a poked worker has a whole tick to answer
	// and the ping still lands well inside WatchdogSec.
	w.tick = time.NewTicker(time.Duration(usec) * time.Microsecond / 3).C
	return w
}

func (w *watchdog) check() {
	alive := true
	for i, wk := range w.d.Workers() {
		b := wk.Beats()
		if b == w.beats[i] {
			alive = false
			wk.Poke()
		}
		w.beats[i] = b
	}
	if alive {
		notify("WATCHDOG=1")
	}
}

// notify speaks systemd's sd_notify protocol when NOTIFY_SOCKET is set.
func notify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.Sendto(fd, []byte(state), 0, &unix.SockaddrUnix{Name: addr})
}
