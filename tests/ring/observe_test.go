package ring

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Prometheus endpoint and `kbridge stats` show live numbers.
func TestMetricsAndStatsShowLiveNumbers(t *testing.T) {
	const addr = "127.0.0.1:9478"
	b := newBed(t, bedOpts{})
	b.Stop(true)
	setMetrics(t, b, addr)
	b.Start()
	ps := b.PacketSocket()
	const n = 50
	var frames [][]byte
	for i := range n {
		frames = append(frames, testFrame(300, uint32(i)))
	}
	if _, err := b.Port.Inject(0, frames, ringtestOpts(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := onlyTest(ps.Receive(n, 5*time.Second)); len(got) != n {
		t.Fatalf("kernel got %d of %d frames", len(got), n)
	}
	_, _ = b.Port.Inject(0, [][]byte{testFrame(9, 999)}, ringtestOpts(0, 0)) // a runt
	waitUntil(t, "the runt to be counted", func() bool { return b.Status().Drops["runt"] == 1 })

	body := scrape(t, addr)
	if v := metric(t, body, `kbridge_packets_total{direction="to_kernel",queue="0"}`); v != n {
		t.Errorf("to_kernel packets = %v, want %d", v, n)
	}
	if v := metric(t, body, `kbridge_bytes_total{direction="to_kernel",queue="0"}`); v != n*300 {
		t.Errorf("to_kernel bytes = %v, want %d", v, n*300)
	}
	if v := metric(t, body, `kbridge_drops_total{queue="0",reason="runt"}`); v != 1 {
		t.Errorf("runt drops = %v, want 1", v)
	}
	if v := metric(t, body, `kbridge_residence_seconds_count{queue="0"}`); v != n {
		t.Errorf("residence histogram holds %v packets, want %d", v, n)
	}
	if v := metric(t, body, `kbridge_policy_mode{mode="adaptive",queue="0"}`); v != 1 {
		t.Errorf("policy_mode adaptive = %v", v)
	}
	for _, name := range []string{"kbridge_parks_total", "kbridge_wakeups_total", "kbridge_spin_seconds_total", "kbridge_app_kicks_total"} {
		metric(t, body, name+`{queue="0"}`)
	}
	out := kbridgeStats(t, b.Sock)
	for _, want := range []string{`"to_kernel_packets": 50`, `"runt": 1`, `"mode": "adaptive"`} {
		if !strings.Contains(out, want) {
			t.Errorf("kbridge stats lacks %s:\n%s", want, out)
		}
	}
}

func setMetrics(t *testing.T, b *bed, addr string) {
	t.Helper()
	cur, err := os.ReadFile(b.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(cur), `metrics: ""`, "metrics: "+addr, 1)
	if err := os.WriteFile(b.Cfg, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	// Dial on a thread inside the namespace: http.Transport would dial on
	// another goroutine, outside it.
	var conn net.Conn
	if err := inNS(func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func metric(t *testing.T, body, name string) float64 {
	t.Helper()
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(name) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("metric %s not exported", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func kbridgeStats(t *testing.T, sock string) string {
	out, err := exec.Command(env.Bin, "stats", "--socket", sock).CombinedOutput()
	if err != nil {
		t.Fatalf("kbridge stats: %v\n%s", err, out)
	}
	return string(out)
}
