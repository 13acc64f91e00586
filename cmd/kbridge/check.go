package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kbridge/kbridge/config"
	"github.com/kbridge/kbridge/daemon"
	"github.com/kbridge/kbridge/doctor"
	"github.com/kbridge/kbridge/internal/sockfile"
)

// kbridge check: what a start needs, without starting. Exit 0: the file is
// valid and the host ready; 1: the host is not (the app's DPDK is not
// reachable, no hugepages, a worker CPU on an app lcore, a socket directory
// kbridge cannot use, privileges missing); 2: the file is wrong, every
// mistake named as run names it. The host's checks are doctor's (hugepages,
// hugetlbfs, the DPDK runtime, CPUs), with those below that only a start
// needs.

// Check names of kbridge check's own findings (doctor's keep theirs).
const (
	checkConfig     = "config"
	checkPrivileges = "privileges"
	checkControl    = "control-socket"
	checkVhost      = "vhost-socket"
)

func checkCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "check",
		Short: "Check the configuration and the host without starting; exit 0, 1 or 2",
		Long: `Check what kbridge run needs, without starting it: the configuration file
(every mistake named, as run names it) and the host: in mode ring the app's
DPDK reachable (its runtime directory and config file for dpdk.file_prefix),
hugepages and hugetlbfs, the worker CPUs against the app's lcores, the
directories of the control socket and of mode vhost's socket, and the
privileges to make the TAP. Nothing is changed.

Exit status: 0 the file is valid and the host ready; 1 the host is not ready
(each finding says why and how to fix it); 2 the configuration is wrong. For
ExecStartPre= and CI.`,
		Example: `  kbridge check --config /etc/kbridge/kbridge.yaml
  kbridge check --instance kb1 --json`,
	}
	src := addConfigSource(c.Flags())
	jsonOut := c.Flags().Bool("json", false, "print JSON for machines (doctor's form)")
	root := c.Flags().String("root", "/", "read /proc, /sys and the DPDK runtime under this `dir` (fixture trees)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return checkCmd(src, *root, *jsonOut, c.OutOrStdout())
	}
	return c
}

// privileges is the privileges check (capabilities); tests replace it.
var privileges = capabilities

func checkCmd(src configSource, root string, jsonOut bool, out io.Writer) error {
	cfg, missing, err := src.load()
	if err != nil {
		return usageError{err}
	}
	ev := src.file() + ": valid"
	if missing {
		ev = src.file() + " missing: the defaults, as an empty file gives"
	}
	serves := "interface " + cfg.Interface.Name
	if cfg.ServesMany() {
		specs, _ := cfg.PortSpecs()
		names := make([]string, len(specs))
		for i, sp := range specs {
			names[i] = sp.Port
		}
		serves = "ports [" + strings.Join(names, ", ") + "]"
		if cfg.Discover {
			serves += " and every other the app creates (discover)"
		}
	}
	results := []doctor.Result{{Check: checkConfig, Status: doctor.Pass,
		Evidence: fmt.Sprintf("%s (mode %s, %s)", ev, cfg.Mode, serves)}}
	results = append(results, hostChecks(cfg, root)...)
	results = append(results, privileges(), controlDir(cfg.Stats.Socket))
	if cfg.Mode == config.ModeVhost && !cfg.Vhost.Client {
		results = append(results, vhostDir(cfg.VhostSocket()))
	}
	if err := doctor.Render(out, results, jsonOut); err != nil {
		return err
	}
	if code := doctor.ExitCode(results); code != 0 {
		return exitError{code}
	}
	return nil
}

// hostChecks runs doctor's checks a start of cfg's mode needs, under root.
// In mode ring the app's DPDK must be running: doctor's warning that its
// runtime directory is missing is a failure here.
func hostChecks(cfg config.Config, root string) []doctor.Result {
	var only []string
	switch cfg.Mode {
	case config.ModeRing, config.ModeVhost:
		only = []string{doctor.CheckHugepages, doctor.CheckCPUs}
	default:
		return nil // mode xdp: no EAL, no workers
	}
	results := doctor.Run(context.Background(), doctor.Options{
		Root:       root,
		Only:       only,
		FilePrefix: cfg.DPDK.FilePrefix,
		RuntimeDir: cfg.DPDK.RuntimeDir,
		WorkerCPUs: cfg.WorkerCPUs(),
		PolicyMode: string(cfg.Policy.Mode),
	})
	var out []doctor.Result
	for _, r := range results {
		if r.Check == doctor.CheckDPDKRuntime {
			if cfg.Mode != config.ModeRing {
				continue // mode vhost runs an EAL of its own
			}
			if r.Status == doctor.Warn && strings.Contains(r.Evidence, "config missing") {
				r.Status = doctor.Fail
			}
		}
		out = append(out, r)
	}
	return out
}

// capabilities: making the TAP needs CAP_NET_ADMIN, joining the app's
// hugepage memory CAP_IPC_LOCK (or a memlock limit kbridge cannot know).
func capabilities() doctor.Result {
	r := doctor.Result{Check: checkPrivileges}
	var hdr unix.CapUserHeader
	var data [2]unix.CapUserData
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		r.Status, r.Evidence = doctor.Warn, "capget: "+err.Error()
		return r
	}
	have := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var lack []string
	for _, c := range []struct {
		n    uint
		name string
	}{{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {unix.CAP_IPC_LOCK, "CAP_IPC_LOCK"}} {
		if !have(c.n) {
			lack = append(lack, c.name)
		}
	}
	if len(lack) > 0 {
		r.Status = doctor.Fail
		r.Evidence = fmt.Sprintf("uid %d lacks %s: kbridge makes kb0 (netlink, TUNSETIFF) and locks the app's memory", os.Geteuid(), strings.Join(lack, ", "))
		r.Fix = "run kbridge as root, as the unit does (CapabilityBoundingSet= keeps it to what it needs)"
		return r
	}
	r.Status, r.Evidence = doctor.Pass, fmt.Sprintf("uid %d with CAP_NET_ADMIN and CAP_IPC_LOCK", os.Geteuid())
	return r
}

// controlDir: kbridge makes the control socket's directory if missing and
// binds there, and refuses a path that is no socket or that another
// kbridge answers on.
func controlDir(sock string) doctor.Result {
	r := doctor.Result{Check: checkControl}
	fail := func(ev, fix string) doctor.Result {
		r.Status, r.Evidence, r.Fix = doctor.Fail, ev, fix
		return r
	}
	if fi, err := os.Lstat(sock); err == nil {
		switch {
		case fi.Mode().Type() != fs.ModeSocket:
			return fail(sock+" exists and is not a socket: the start refuses it", "remove it, or set stats.socket to another path")
		case daemon.ControlAnswers(sock):
			return fail("a kbridge answers on "+sock+": a second one is refused", "stop it, run this one with another stats.socket (an instance has its own), or take over with kbridge run --takeover")
		}
	}
	ev, fix := writableDir(filepath.Dir(sock))
	if fix != "" {
		return fail(ev, fix)
	}
	r.Status, r.Evidence = doctor.Pass, sock+": "+ev
	return r
}

// vhostDir: mode vhost's server socket needs a directory that is root's
// alone (sockfile.CheckDir, as the start checks it).
func vhostDir(sock string) doctor.Result {
	r := doctor.Result{Check: checkVhost}
	dir := filepath.Dir(sock)
	if err := sockfile.CheckDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.Status, r.Evidence = doctor.Fail, sock+": "+err.Error()
		r.Fix = "make " + dir + " root's alone (owned by root, writable by no one else, no symlink on the way), or set vhost.socket elsewhere"
		return r
	}
	ev, fix := writableDir(dir)
	r.Status, r.Evidence, r.Fix = doctor.Pass, sock+": "+ev, fix
	if fix != "" {
		r.Status = doctor.Fail
	}
	return r
}

// writableDir says whether this process can bind in dir: it is a
// directory it may write, or the nearest directory above that exists is
// (kbridge makes the rest). A fix, when not.
func writableDir(dir string) (evidence, fix string) {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return p + " is not a directory", "set the socket's path under a directory"
			}
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Sprintf("%s not writable by uid %d: %v", p, os.Geteuid(), err), "run kbridge as root, as the unit does"
			}
			if p == dir {
				return dir + " writable", ""
			}
			return dir + " missing, made at start under " + p, ""
		}
		if p == "/" || !errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s: %v", p, err), "make " + dir
		}
	}
}
