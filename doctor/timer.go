package doctor

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// checkKernelTimer reports CONFIG_HZ, what one jiffy-based sleep costs,
// and whether the configured policy relies on such a sleep. This is the
// KNI lesson: a poll loop that "sleeps 5 us" sleeps a whole jiffy.
func checkKernelTimer(_ context.Context, e *env) []Result {
	r := Result{Check: CheckKernelTimer}
	hz, src, err := kernelHZ(e)
	mode := e.opts.PolicyMode
	if mode == "" {
		mode = "adaptive"
	}
	if err != nil {
		r.Status = Warn
		r.Evidence = err.Error() + fmt.Sprintf("; policy mode %s", mode)
		r.Fix = "expose the kernel config (modprobe configs for /proc/config.gz, or install /boot/config-$(uname -r))"
		return []Result{r}
	}
	jiffy := time.Second / time.Duration(hz)
	r.Evidence = fmt.Sprintf("%s: CONFIG_HZ=%d, so a jiffy-based sleep (KNI's schedule_timeout, usleep_range in old drivers) lasts at least %v; policy mode %s",
		src, hz, jiffy, mode)
	switch mode {
	case "busy", "adaptive", "interrupt":
		r.Status = Pass
		r.Evidence += ": no jiffy-granular sleep (spins, then parks on eventfd/epoll)"
	case "fixed":
		r.Status = Warn
		iv := e.opts.FixedInterval
		if iv < jiffy {
			r.Evidence += fmt.Sprintf(" with interval %v, below one jiffy: this is the KNI-like configuration (KNI's sleep would round it up to %v)", iv, jiffy)
		} else {
			r.Evidence += fmt.Sprintf(" with interval %v (%.1f jiffies): every idle poll adds up to %v of latency", iv, float64(iv)/float64(jiffy), iv)
		}
		r.Fix = "mode fixed exists to reproduce KNI for comparison; use mode adaptive in production"
	default:
		r.Status = Warn
		r.Evidence += ": unknown mode"
		r.Fix = "set policy mode to busy, adaptive, interrupt or fixed"
	}
	return []Result{r}
}

// kernelHZ reads CONFIG_HZ from /proc/config.gz, else from
// /boot/config-<release>; src names the file that answered.
func kernelHZ(e *env) (hz int, src string, err error) {
	gzPath := e.path("/proc/config.gz")
	if f, err := os.Open(gzPath); err == nil {
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", gzPath, err)
		}
		hz, err := configHZ(zr)
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", gzPath, err)
		}
		return hz, gzPath, nil
	}
	rel, err := e.read("/proc/sys/kernel/osrelease")
	if err != nil {
		return 0, "", fmt.Errorf("no %s and no kernel release: %w", gzPath, err)
	}
	bootPath := e.path("/boot/config-" + rel)
	f, err := os.Open(bootPath)
	if err != nil {
		return 0, "", fmt.Errorf("no %s and no %s", gzPath, bootPath)
	}
	defer f.Close()
	hz, err = configHZ(f)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", bootPath, err)
	}
	return hz, bootPath, nil
}

func configHZ(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			if err != nil || hz <= 0 {
				return 0, fmt.Errorf("bad CONFIG_HZ=%q", v)
			}
			return hz, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read kernel config: %w", err)
	}
	return 0, fmt.Errorf("no CONFIG_HZ line")
}
