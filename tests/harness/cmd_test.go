package harness

import "testing"

func TestProgram(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ip", "netns", "exec", "kbt-dut", "taskset", "-c", "0", "nfs-ls", "-R", "nfs://198.18.0.1/export"}, "nfs-ls"},
		{[]string{"/usr/bin/iperf3", "-c", "198.18.0.1"}, "iperf3"},
		{[]string{"ip", "-n", "kbt-peer", "link"}, "ip"},
		{[]string{"ip", "netns", "exec"}, "ip"},
		{[]string{"uname"}, "uname"},
	} {
		if got := program(c.args); got != c.want {
			t.Errorf("program(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestWithPolicy(t *testing.T) {
	base := "dpdk:\n  file_prefix: kbt\npolicy:\n  mode: adaptive\n  spin: 20us\nstats:\n  socket: /run/kbt/kbridge.sock\n"
	got := WithPolicy(base, "policy:\n  mode: busy\n")
	want := "dpdk:\n  file_prefix: kbt\nstats:\n  socket: /run/kbt/kbridge.sock\npolicy:\n  mode: busy\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
