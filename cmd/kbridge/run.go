package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/internal/logging"
)

func runCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the bridge: a DPDK secondary of the app, its TAP interface and workers",
		Long: `Run the bridge. In mode ring (the default) kbridge joins the DPDK app as a
secondary process, waits for it and its port (dpdk.wait), makes the TAP
interface and runs a worker per queue; mode vhost serves the app's
virtio-user port; mode xdp loads the XDP programs. SIGTERM or SIGINT stops
it cleanly, SIGHUP (or an edit of the file) reloads the configuration.

Under systemd it sends READY=1 once serving, STATUS= while it waits, and
WATCHDOG=1; its log goes to the journal with a priority per line.`,
		Example: `  kbridge run --config /etc/kbridge/kbridge.yaml
  kbridge run --instance kb1 --log-level debug
  kbridge run --takeover          # take kb0 over from the kbridge serving it
  kbridge run --metrics "[$POD_IP]:9478"   # metrics on an address known only at start`,
	}
	src := addConfigSource(c.Flags())
	takeover := c.Flags().Bool("takeover", false, "take the port and the interface over from the kbridge serving on the control socket (modes ring and vhost)")
	level := c.Flags().String("log-level", "", "the least level logged: debug, info, warn or error (default: the file's log.level, info)")
	metrics := c.Flags().String("metrics", "", "the Prometheus listen `host:port`, over the file's stats.metrics at start and at every reload: an address known only at start (a pod's: deploy/kubernetes passes $(POD_IP):9478)")
	c.RunE = func(*cobra.Command, []string) error {
		return runCmd(src.withMetrics(*metrics), *takeover, *level)
	}
	return c
}

// runCmd plumbs: it loads the configuration, claims the control socket,
// starts the data path and hands it to daemon.Serve, which owns the rest.
// With --takeover, while a kbridge answers on the control socket, the
// start asks it to hand over (daemon/handover.go) and the socket is claimed
// once it let go. The other way round, when this kbridge handed over and
// its successor did not confirm, Serve returns the queues it kept, and it
// executes itself again over them (daemon.TakeBack), to serve anew.
//
// It subscribes to SIGTERM, SIGINT and SIGHUP before anything else, so that
// no signal during start-up (the EAL's init, the wait for the primary or
// the port, the claim, the TAP) takes Go's default action, which would kill
// kbridge holding the app's port: a stop then ends the start-up, releases
// what it took and exits 0; a SIGHUP is remembered and reloads once Serve
// runs.
func runCmd(src configSource, takeover bool, logLevel string) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	// Before anything that could start a process: systemd's fds, or the
	// queues this kbridge kept when a takeover was not confirmed and it
	// executed itself again (daemon.TakeBack), are this one's alone.
	stored, lerr := daemon.TakeListenFds()
	back, backFrom := daemon.TakenBack()
	ealAttempt := daemon.EALAttempt() // executed again after EAL found the app's addresses taken

	level := new(slog.LevelVar)
	if logLevel != "" {
		l, err := logging.ParseLevel(logLevel)
		if err != nil {
			return usageError{fmt.Errorf("--log-level: %w", err)}
		}
		level.Set(l)
	}
	log := logging.New(os.Stderr, level)
	if lerr != nil {
		log.Warn("ignoring the fds systemd passed", "err", lerr)
	}
	cfg, missing, err := src.load()
	if err != nil {
		return usageError{err}
	}
	// The file's log.level rules, on start and each reload, unless
	// --log-level was given.
	fileLevel := level
	if logLevel != "" {
		fileLevel = nil
	}
	setLevel(fileLevel, cfg)
	if missing {
		log.Info("no configuration file: running on the defaults", "file", src.file())
	}
	if *src.instance != "" {
		log = log.With("instance", *src.instance)
		if keys := config.PlainDefaults(cfg, *src.instance); len(keys) > 0 {
			log.Warn("the instance's file sets what the plain kbridge uses, not the instance's defaults: "+
				"was it copied from kbridge.yaml? Delete these lines to get the instance's own",
				"file", src.file(), "keys", strings.Join(keys, ", "))
		}
	}
	for _, c := range config.Clashes(src.file(), cfg) {
		log.Warn("another configuration file beside this one claims the same "+c.Key+
			": a kbridge started from each would fight over it (the second is refused at start)",
			"file", src.file(), "other", c.File, c.Key, c.Val)
	}
	opts := daemon.StartOpts{Stored: append(stored, back...), EALAttempt: ealAttempt}
	if len(back) > 0 && backFrom != 0 {
		log.Warn("taking the port and the interface back: the takeover by pid "+strconv.Itoa(backFrom)+" was not confirmed",
			"queues", len(back))
		opts.TakenBackFrom = backFrom
	}
	var ctl *daemon.Control
	switch {
	case takeover && daemon.ControlAnswers(cfg.Stats.Socket):
		// The socket is the old kbridge's until it has handed over.
		opts.Takeover = true
		log.Warn("taking over from the kbridge serving on the control socket", "socket", cfg.Stats.Socket)
	case takeover:
		log.Info("--takeover: no kbridge answers on the control socket: starting anew", "socket", cfg.Stats.Socket)
		fallthrough
	default:
		// The socket first: a second kbridge on the same socket is
		// refused before it touches the app's port or the interface.
		if ctl, err = daemon.ListenControl(cfg.Stats.Socket, log); err != nil {
			return err
		}
	}
	r, reload, err := start(cfg, log, sigs, opts)
	if again := (*daemon.ReattachError)(nil); errors.As(err, &again) {
		if ctl != nil {
			_ = ctl.Close() // the next image claims it anew
		}
		return daemon.Reattach(again)
	}
	if err == nil && r != nil && ctl == nil {
		if ctl, err = listenAfter(cfg.Stats.Socket, log); err != nil {
			err = errors.Join(err, r.Stop())
			r = nil
		}
	}
	if err != nil || r == nil {
		if ctl != nil {
			_ = ctl.Close()
		}
		return err
	}
	if reload {
		sigs <- syscall.SIGHUP // Serve's first act: the remembered reload
	}
	err = daemon.Serve(context.Background(), r, daemon.Options{
		ConfigPath: src.file(),
		Load: func(path string) (config.Config, error) {
			c, err := src.loadFile(path)
			if err == nil {
				setLevel(fileLevel, c)
			}
			return c, err
		},
		Control: ctl,
		Metrics: cfg.Stats.Metrics,
		Version: version,
		Log:     log,
		Signals: sigs,
	})
	var takeBack *daemon.TakeBackError
	if errors.As(err, &takeBack) {
		return daemon.TakeBack(takeBack) // returns only if it failed
	}
	return err
}

// start runs daemon.StartWith while it listens to sigs. A SIGTERM or
// SIGINT cancels the start-up; whatever the path took by the time the step
// in progress ends is stopped (the port released, the TAP removed), and
// start returns a nil Runner and nil error: a clean exit. A SIGHUP is
// remembered (reload reports it).
func start(cfg config.Config, log *slog.Logger, sigs <-chan os.Signal, opts daemon.StartOpts) (r daemon.Runner, reload bool, err error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type started struct {
		r   daemon.Runner
		err error
	}
	done := make(chan started, 1)
	go func() {
		r, err := daemon.StartWith(ctx, cfg, log, func(s string) { daemon.Notify("STATUS=" + s) }, opts)
		done <- started{r, err}
	}()
	var stop os.Signal
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if !reload {
					log.Info("SIGHUP during start-up: the configuration is re-read once the bridge runs")
				}
				reload = true
				continue
			}
			if stop == nil {
				stop = sig
				log.Info("stopping during start-up: releasing what was taken once the step in progress ends", "signal", sig.String())
				daemon.Notify("STOPPING=1")
				cancel(errors.New("signal " + sig.String()))
			}
		case s := <-done:
			switch {
			case stop == nil:
				return s.r, reload, s.err
			case s.err == nil:
				err := s.r.Stop()
				log.Info("stopped during start-up", "signal", stop.String(), "err", err)
				return nil, false, err
			case errors.Is(s.err, daemon.ErrStartCancelled) || errors.As(s.err, new(*daemon.ReattachError)):
				log.Info("stopped during start-up", "signal", stop.String())
				return nil, false, nil
			}
			return nil, false, s.err
		}
	}
}

// listenAfter claims the control socket once the kbridge that handed over
// has let it go: it closes it as it exits.
func listenAfter(sock string, log *slog.Logger) (*daemon.Control, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctl, err := daemon.ListenControl(sock, log)
		if err == nil || !errors.Is(err, daemon.ErrServing) || time.Now().After(deadline) {
			return ctl, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setLevel sets level from the configuration's log.level; nil: the
// command line's --log-level rules.
func setLevel(level *slog.LevelVar, cfg config.Config) {
	if level == nil {
		return
	}
	if l, err := logging.ParseLevel(cfg.Log.Level); err == nil { // validated
		level.Set(l)
	}
}
