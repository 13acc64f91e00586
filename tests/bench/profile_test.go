package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A few samples as `perf script -F comm,pid,tid,cpu,period,ip,sym,dso`
// prints them: idle, kbridge in Go, kbridge in tun_get_user's copy, kbridge
// in TCP receive under its tun write, a softirq in the peer's iperf3, the
// client in tcp_recvmsg, a kernel thread.
const perfScriptText = `swapper     0/0     [000]    1000000 
	ffffffff8225f8ab pv_native_safe_halt ([kernel.kallsyms])
	ffffffff813d00d6 do_idle ([kernel.kallsyms])

kbridge   100/102   [000]    1000000 
	           4a1b2 github.com/kbridge/kbridge/tap.(*Worker).poll (/work/bin/kbridge)
	           4a0aa runtime.goexit (/work/bin/kbridge)

kbridge   100/103   [000]    1000000 
	ffffffff81a00001 copy_from_iter ([kernel.kallsyms])
	ffffffff81a00002 tun_get_user ([kernel.kallsyms])
	ffffffff81a00003 tun_chr_write_iter ([kernel.kallsyms])
	ffffffff81a00004 vfs_write ([kernel.kallsyms])
	           4a1ff syscall.Syscall (/work/bin/kbridge)

kbridge   100/103   [000]    1000000 
	ffffffff81b00001 tcp_v4_rcv ([kernel.kallsyms])
	ffffffff81b00002 ip_local_deliver ([kernel.kallsyms])
	ffffffff81b00003 __netif_receive_skb_one_core ([kernel.kallsyms])
	ffffffff81a00002 tun_get_user ([kernel.kallsyms])
	ffffffff81a00004 vfs_write ([kernel.kallsyms])

iperf3   300/300   [000]    2000000 
	ffffffff81c00001 tcp_v4_rcv ([kernel.kallsyms])
	ffffffff81c00002 net_rx_action ([kernel.kallsyms])
	ffffffff81c00003 handle_softirqs ([kernel.kallsyms])
	ffffffff81c00004 tcp_sendmsg ([kernel.kallsyms])

iperf3   400/400   [000]    1000000 
	ffffffff81d00001 _copy_to_iter ([kernel.kallsyms])
	ffffffff81d00002 skb_copy_datagram_iter ([kernel.kallsyms])
	ffffffff81d00003 tcp_recvmsg_locked ([kernel.kallsyms])
	           12345 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)

kworker/0:1H-kb   50/50   [000]    1000000 
	ffffffff81e00001 process_one_work ([kernel.kallsyms])

ganesha.nfsd   300/310   [000]    1000000 
	ffffffff81f00001 memcpy ([kernel.kallsyms])
	ffffffff81f00002 tpacket_rcv ([kernel.kallsyms])
	ffffffff81f00003 __netif_receive_skb_core ([kernel.kallsyms])
	ffffffff81f00004 net_rx_action ([kernel.kallsyms])
	ffffffff81f00005 handle_softirqs ([kernel.kallsyms])

:-1    -1/-1    [000]    1000000 
	           1 [unknown] ([unknown])
	           2 [unknown] ([unknown])
`

func TestProfileFromPerfScript(t *testing.T) {
	samples, err := parsePerfScript(perfScriptText)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 9 {
		t.Fatalf("%d samples, want 9", len(samples))
	}
	if s := samples[6]; s.Comm != "kworker/0:1H-kb" || s.PID != 50 {
		t.Errorf("kworker sample read as %+v", s)
	}
	if f := samples[5].Frames[3]; f.Sym != "[libc.so.6]" || f.Kernel {
		t.Errorf("unknown user frame read as %+v", f)
	}
	w := Who{Kbridge: 100, App: 200, Peer: map[int]bool{300: true}, ClientComms: map[string]bool{"iperf3": true}}
	want := []string{shIdle, shKbUser, shKbSys, shTCP, shSoftirq, shTCP, shOther, shSoftNIC, shOther}
	for i, s := range samples {
		if got := w.classify(s); got != want[i] {
			t.Errorf("sample %d (%s): %q, want %q", i, s.Comm, got, want[i])
		}
	}
	p := fold("up", samples, w)
	if p.Total != 10e6 {
		t.Errorf("total %d ns, want 10e6", p.Total)
	}
	if got := p.Share(shTCP); math.Abs(got-20) > 1e-9 {
		t.Errorf("TCP share %.2f%%, want 20", got)
	}
	if got := p.Own(shSoftirq); math.Abs(got-2.0/7*100) > 1e-9 { // of the 7 ms that are not idle or other
		t.Errorf("softirq share of the bed's work %.2f%%, want 28.6", got)
	}
	folded := p.foldedText()
	for _, line := range []string{
		"kbridge: syscalls;kbridge;syscall.Syscall;vfs_write;tun_chr_write_iter;tun_get_user;copy_from_iter 1000000",
		"other;kworker*;process_one_work 1000000",
		"other;:-1;[unknown] 1000000", // a run of unnamed frames folds into one
	} {
		if !strings.Contains(folded, line+"\n") {
			t.Errorf("folded stacks lack %q:\n%s", line, folded)
		}
	}
	if got := topLeaves(p, shTCP, 5); got != "`_copy_to_iter` 10.0, `tcp_v4_rcv` 10.0" {
		t.Errorf("top TCP leaves %q", got)
	}
	q := fold("up", samples[:1], w)
	if got := shareCell([]*Profile{p, q}, shIdle); got != "18.2 (10.0-100.0)" {
		t.Errorf("idle cell over two rounds %q", got)
	}
}

func TestParsePerfScriptRejectsGarbage(t *testing.T) {
	if _, err := parsePerfScript("no header here\n"); err == nil {
		t.Error("want an error for a line that is no sample header")
	}
	if _, err := parsePerfScript(""); err == nil {
		t.Error("want an error for no samples")
	}
}

func TestFoldedTree(t *testing.T) {
	root, err := parseFolded("a;b;c 3\na;b 1\nx 2\n\n")
	if err != nil {
		t.Fatal(err)
	}
	if root.value != 6 || root.children["a"].value != 4 || root.children["a"].children["b"].value != 4 ||
		root.children["a"].children["b"].children["c"].value != 3 || root.depth() != 4 {
		t.Errorf("tree: root %d, a %d, depth %d", root.value, root.children["a"].value, root.depth())
	}
	if _, err := parseFolded("a;b\n"); err == nil {
		t.Error("want an error for a line without a count")
	}
	if _, err := parseFolded(""); err == nil {
		t.Error("want an error for no samples")
	}
}

func TestWriteFlame(t *testing.T) {
	samples, err := parsePerfScript(perfScriptText)
	if err != nil {
		t.Fatal(err)
	}
	p := fold("up", samples, Who{Kbridge: 100, Peer: map[int]bool{300: true}, ClientComms: map[string]bool{"iperf3": true}})
	path := filepath.Join(t.TempDir(), "flame.png")
	if v := os.Getenv("KBT_BENCH_FLAME"); v != "" { // to look at it
		path = v
	}
	if err := writeFlame(path, "test", "shares", p.foldedText()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %d bytes, %v", len(data), err)
	}
	if err := writeFlame(path, "test", "", ""); err == nil {
		t.Error("want an error with nothing to draw")
	}
}

func TestShortSym(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/kbridge/kbridge/tap/vnet.(*Super).Segment": "vnet.(*Super).Segment",
		"runtime.memmove":               "runtime.memmove",
		"[libc.so.6]":                   "[libc.so.6]",
		"golang.org/x/sys/unix.Syscall": "unix.Syscall",
	} {
		if got := shortSym(in); got != want {
			t.Errorf("shortSym(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFitText(t *testing.T) {
	sty := flameLabelStyle()
	if got := fitText(sty, "tcp_v4_rcv", 1000); got != "tcp_v4_rcv" {
		t.Errorf("wide box: %q", got)
	}
	got := fitText(sty, "a_rather_long_function_name", sty.Width("a_rather_long")+0.1)
	if !strings.HasSuffix(got, "..") || sty.Width(got) > sty.Width("a_rather_long")+0.1 {
		t.Errorf("narrow box: %q", got)
	}
	if got := fitText(sty, "abcdef", 0.5); got != "" {
		t.Errorf("no room: %q", got)
	}
}
