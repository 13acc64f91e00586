package kbridge_test

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kbridge/kbridge/include/kbridge/abiprobe"
)

var writeABI = flag.Bool("write-abi", false,
	"write testdata/abi-v<KBRIDGE_VERSION>.txt from the probe, if that version has none yet")

// grows are the sizes an appending version may enlarge: the control
// block, whose end each version extends (kbridge reads an older app's
// block up to its version's end). Every other line of a released version
// holds in every later one.
var grows = map[string]bool{"sizeof kbridge_ctl": true}

// TestLayoutIsTheReleasedOnes holds the layout of what the app and
// kbridge share (abiprobe's table: every sizeof and offsetof of the
// control block, the held record and the wakeup message, the constants
// that size them, the layout items' order) to the files of the released
// versions in testdata: the current version's file exactly, and every
// older version's line by line (append-only: what an older app lays out
// is where kbridge still reads it).
//
// When KBRIDGE_VERSION grows: append the new fields (never move or resize
// an old one), add their lines to abiprobe/probe.c, then
//
//	go test ./include/kbridge/ -run TestLayoutIsTheReleasedOnes -write-abi
//
// writes testdata/abi-v<N>.txt, and this test checks that every older
// file's lines still hold in it. A reserved field put to use under a new
// name keeps its offset: say so in the new file with a line
// "# renamed <old line's name> -> <new line's name>". A released file is
// never edited.
func TestLayoutIsTheReleasedOnes(t *testing.T) {
	v := abiprobe.Version()
	probed := abiprobe.Items()
	name := filepath.Join("testdata", fmt.Sprintf("abi-v%d.txt", v))
	if *writeABI {
		if _, err := os.Stat(name); err == nil {
			t.Fatalf("%s exists: a released version's layout is never rewritten (KBRIDGE_VERSION is %d; a new layout needs a new version)", name, v)
		}
		if err := os.WriteFile(name, []byte(format(v, probed)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d lines)", name, len(probed))
	}
	cur, err := readABI(name)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("KBRIDGE_VERSION is %d and there is no %s: the layout of a new version is recorded with\n"+
			"\tgo test ./include/kbridge/ -run TestLayoutIsTheReleasedOnes -write-abi\n"+
			"once its fields are appended and their lines added to abiprobe/probe.c", v, name)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"pointer", "RTE_CACHE_LINE_SIZE"} {
		if got, want := value(probed, env), cur.value(env); got != want {
			t.Skipf("the files of testdata are for %s %d; this build has %d", env, want, got)
		}
	}

	// The current version: exactly its file, in order.
	if !same(probed, cur.items) {
		t.Errorf("the layout of version %d is not %s (a field moved, grew or went; or probe.c's lines changed):\n%s\n"+
			"A released version's layout does not change: append new fields in a new version (see this test's doc)",
			v, name, diff(probed, cur.items))
	}

	// Every older version: each of its lines holds (renamed, or a size
	// that grows by appending, aside).
	older, err := filepath.Glob(filepath.Join("testdata", "abi-v*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	vre := regexp.MustCompile(`abi-v(\d+)\.txt$`)
	for _, f := range older {
		m := vre.FindStringSubmatch(f)
		if m == nil {
			t.Errorf("%s: not named abi-v<N>.txt", f)
			continue
		}
		ov, _ := strconv.Atoi(m[1])
		if ov > v {
			t.Errorf("%s is newer than the headers' KBRIDGE_VERSION %d", f, v)
		}
		if ov >= v {
			continue
		}
		old, err := readABI(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range old.items {
			now := cur.newName(it.Name)
			got, ok := lookup(probed, now)
			switch {
			case !ok:
				t.Errorf("version %d's %q (%s) is gone in version %d: an old field stays where it was (a reserved one put to use: a \"# renamed\" line in %s)", ov, it.Name, f, v, name)
			case grows[now] && got < it.Value:
				t.Errorf("%s is %d in version %d, %d in version %d: it may only grow", now, got, v, it.Value, ov)
			case !grows[now] && got != it.Value:
				t.Errorf("%s is %d in version %d, %d in version %d (%s): an old field keeps its offset and size", now, got, v, it.Value, ov, f)
			}
		}
	}
}

// abiFile is one version's file: its lines, and its renames (new name by
// old).
type abiFile struct {
	items   []abiprobe.Item
	renamed map[string]string
}

func (a abiFile) value(name string) uint64 { v, _ := lookup(a.items, name); return v }

func (a abiFile) newName(old string) string {
	if n, ok := a.renamed[old]; ok {
		return n
	}
	return old
}

// readABI reads a file of "name value" lines; "#" starts a comment, and
// "# renamed OLD -> NEW" records a rename.
func readABI(name string) (abiFile, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return abiFile{}, err
	}
	a := abiFile{renamed: make(map[string]string)}
	for i, l := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(l, "# renamed "); ok {
			old, now, ok := strings.Cut(r, " -> ")
			if !ok {
				return a, fmt.Errorf("%s:%d: %q: want \"# renamed OLD -> NEW\"", name, i+1, l)
			}
			a.renamed[strings.TrimSpace(old)] = strings.TrimSpace(now)
			continue
		}
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			return a, fmt.Errorf("%s:%d: %q: want \"name value\"", name, i+1, l)
		}
		v, err := strconv.ParseUint(l[sp+1:], 10, 64)
		if err != nil {
			return a, fmt.Errorf("%s:%d: %q: %w", name, i+1, l, err)
		}
		a.items = append(a.items, abiprobe.Item{Name: l[:sp], Value: v})
	}
	return a, nil
}

func format(v int, items []abiprobe.Item) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kbridge.h version %d: the layout of what the app and kbridge share, as\n", v)
	b.WriteString("# include/kbridge/abiprobe reads it (sizeof, offsetof, the constants that size\n")
	b.WriteString("# them, the layout items' indices). Released: never edited; a new version gets\n")
	b.WriteString("# a file of its own (include/kbridge/abi_test.go says how).\n")
	for _, it := range items {
		fmt.Fprintf(&b, "%s %d\n", it.Name, it.Value)
	}
	return b.String()
}

func lookup(items []abiprobe.Item, name string) (uint64, bool) {
	for _, it := range items {
		if it.Name == name {
			return it.Value, true
		}
	}
	return 0, false
}

func value(items []abiprobe.Item, name string) uint64 { v, _ := lookup(items, name); return v }

func same(a, b []abiprobe.Item) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// diff names each line that differs: its value here and in the file, or
// that one side lacks it.
func diff(probed, file []abiprobe.Item) string {
	var b strings.Builder
	for _, it := range probed {
		if v, ok := lookup(file, it.Name); !ok {
			fmt.Fprintf(&b, "\t%s %d: not in the file\n", it.Name, it.Value)
		} else if v != it.Value {
			fmt.Fprintf(&b, "\t%s: %d here, %d in the file\n", it.Name, it.Value, v)
		}
	}
	for _, it := range file {
		if _, ok := lookup(probed, it.Name); !ok {
			fmt.Fprintf(&b, "\t%s %d: in the file, not probed\n", it.Name, it.Value)
		}
	}
	if b.Len() == 0 {
		b.WriteString("\tthe same lines in another order\n")
	}
	return b.String()
}
