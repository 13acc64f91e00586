package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
)

// Options configures Serve.
type Options struct {
	// ConfigPath is re-read on SIGHUP and when the file changes, and
	// what can change live is applied (Runner.Reload). Empty: no reloads.
	ConfigPath string
	// Control is the control socket, from ListenControl. Nil: Serve
	// listens on Socket itself.
	Control *Control
	Socket  string
	// Metrics is the Prometheus listen address; empty: none.
	Metrics string
	// Version is kbridge's, for kbridge_build_info.
	Version string
	Log     *slog.Logger
	// Notify speaks systemd's sd_notify; nil: Notify.
	Notify func(state string)
	// Watchdog is how often Serve asks Runner.Alive and, if alive, sends
	// WATCHDOG=1. Zero: a third of $WATCHDOG_USEC when systemd asks this
	// process for pings, else never.
	Watchdog time.Duration
	// Signals delivers SIGTERM and SIGINT (stop) and SIGHUP (reload).
	// Nil: Serve subscribes to them itself.
	Signals <-chan os.Signal
	// Load reads the configuration file; nil: config.Load.
	Load func(path string) (config.Config, error)
}

// Serve runs what surrounds the data path r until ctx ends, SIGTERM or
// SIGINT comes, or r stops by itself: the control socket, the metrics (a
// busy address is retried in the background, never fatal), reloads on
// SIGHUP and file changes, and the systemd watchdog. Then it stops r. It
// returns nil on a requested stop, else why the path stopped (r.Err(), or a
// control socket error), joined with what Stop returned.
func Serve(ctx context.Context, r Runner, opts Options) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	notify := opts.Notify
	if notify == nil {
		notify = Notify
	}
	load := opts.Load
	if load == nil {
		load = config.Load
	}
	ctl := opts.Control
	if ctl == nil {
		var err error
		if ctl, err = ListenControl(opts.Socket, log); err != nil {
			return errors.Join(err, r.Stop())
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Metrics listen before /status answers and before READY=1, so that
	// whoever waits for either finds them (a busy address is retried).
	waitMetrics := func() {}
	if opts.Metrics != "" {
		reg, err := NewRegistry(r.Collector(), opts.Version)
		if err != nil {
			log.Error("metrics: not served", "err", err)
		} else {
			waitMetrics = StartMetrics(ctx, opts.Metrics, reg, log)
		}
	}
	ctl.SetStatus(r.Status)
	var takeovers <-chan takeoverRequest
	ho, canHand := r.(handOverer)
	if canHand {
		takeovers = ctl.acceptTakeovers()
	}
	ctlErr := ctl.Errors()

	sigs := opts.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer signal.Stop(ch)
		sigs = ch
	}
	var changed <-chan struct{}
	if opts.ConfigPath != "" {
		var err error
		if changed, err = watchFile(ctx, opts.ConfigPath); err != nil {
			log.Warn("not watching the configuration file; reload with SIGHUP", "err", err)
		}
	}
	var dog <-chan time.Time
	if every := opts.Watchdog; every > 0 || watchdogInterval() > 0 {
		if every <= 0 {
			every = watchdogInterval()
		}
		t := time.NewTicker(every)
		defer t.Stop()
		dog = t.C
	}
	notify("READY=1\nSTATUS=" + r.Summary())

	var runErr error
	done, ctxDone := r.Done(), ctx.Done()
	// handing: the path stopped for a handover, whose outcome the
	// protocol's goroutine reports on handed once the successor confirmed
	// or not (up to confirmWithin and giveUpWithin): meanwhile the
	// watchdog is fed, and a stop waits for it.
	handing, stopAsked := false, ""
	handed := make(chan handedOver, 1)
	stop := func(key, why string) bool {
		if !handing {
			log.Info("stopping", key, why)
			return true
		}
		log.Warn("a stop during a handover waits for the successor's confirmation", key, why)
		stopAsked = why
		return false
	}
loop:
	for {
		select {
		case <-ctxDone:
			if stop("cause", context.Cause(ctx).Error()) {
				break loop
			}
			ctxDone = nil // heard
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(r, opts.ConfigPath, load, log)
				continue
			}
			if stop("signal", sig.String()) {
				break loop
			}
		case <-changed:
			log.Info("configuration file changed", "file", opts.ConfigPath)
			reload(r, opts.ConfigPath, load, log)
		case <-dog:
			if handing || r.Alive() {
				notify("WATCHDOG=1")
			}
		case err, ok := <-ctlErr:
			if ok {
				runErr = err
				break loop
			}
			ctlErr = nil // closed from elsewhere: nothing more to hear
		case req := <-takeovers:
			if startHandOver(ho, req, handed, log) {
				// The path stopped, closing Done: the outcome follows on
				// handed. Another request is refused by ho (stopping).
				handing, done = true, nil
			}
		case h := <-handed:
			runErr = h.logged(log)
			var back *TakeBackError
			if stopAsked != "" && errors.As(runErr, &back) {
				log.Info("stopping, as asked during the handover: the interface goes", "cause", stopAsked)
				for _, fd := range back.Fds {
					unix.Close(fd)
				}
				runErr = nil
			}
			break loop
		case <-done:
			runErr = r.Err()
			if runErr == nil {
				runErr = errors.New("the data path stopped")
			}
			log.Error("stopping", "err", runErr)
			break loop
		}
	}
	notify("STOPPING=1")
	cancel()
	_ = ctl.Close()
	waitMetrics()
	return errors.Join(runErr, r.Stop())
}

// reload re-reads the configuration and applies what can change live. An
// invalid file is refused and nothing changes.
func reload(r Runner, path string, load func(string) (config.Config, error), log *slog.Logger) {
	if path == "" {
		log.Warn("reload: no configuration file to re-read")
		return
	}
	cfg, err := load(path)
	if err == nil {
		err = r.Reload(cfg)
	}
	var re *RestartError
	switch {
	case err == nil:
		log.Info("reloaded", "file", path)
	case errors.As(err, &re):
		log.Warn("reloaded what can change live; restart kbridge for the rest",
			"file", path, "need_restart", strings.Join(re.Keys, ", "))
	default:
		log.Error("reload refused, keeping the running configuration", "file", path, "err", err)
	}
}

// watchdogInterval is a third of $WATCHDOG_USEC when systemd wants this
// process to ping (go-systemd reads it, WATCHDOG_PID included), else 0.
// A third: a poked worker has a whole tick to answer and the ping still
// lands well inside WatchdogSec.
func watchdogInterval() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d / 3
}

// Notify speaks systemd's sd_notify protocol when NOTIFY_SOCKET is set
// (go-systemd).
func Notify(state string) { _, _ = sd.SdNotify(false, state) }

// NotifyFds sends state to systemd with fds attached (SCM_RIGHTS), as
// sd_pid_notify_with_fds does: FDSTORE=1 stores them. Without
// NOTIFY_SOCKET it does nothing. go-systemd sends no fds: this is the fd
// store's own sendmsg.
func NotifyFds(state string, fds []int) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer unix.Close(fd)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(fd, []byte(state), oob, &unix.SockaddrUnix{Name: addr}, 0); err != nil {
		return fmt.Errorf("sd_notify %s: %w", addr, err)
	}
	return nil
}
