// Package docs holds no code: its test keeps the repository's Markdown
// honest. Every relative link must name a file that exists and, with a
// #fragment, a heading of that file; no document may cite material that
// lives outside the repository; every configuration key has its one row in
// CONFIG.md (XDP.md for the xdp section). It reads files only, so it runs
// in milliseconds and needs no root.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/kbridge/kbridge/config"
)

// root is the repository, one directory up from this package.
const root = ".."

// outside names what a document must not cite: notes that are not part of
// the repository, so a reader of a clone cannot follow them. The names are
// put together here so that this file does not cite them either.
var outside = []string{".." + "/shared", "DESIGN" + ".md", "TESTBED" + ".md"}

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at whitespace or the closing parenthesis.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownFiles returns every .md file of the repository, relative to root,
// leaving out build output, results and test data.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "results", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Markdown files found under " + root)
	}
	return files
}

// line is one line of a Markdown file and its number, from 1.
type line struct {
	n    int
	text string
}

// prose returns the lines of a Markdown file outside fenced code blocks,
// with inline code spans blanked out.
func prose(text string) []line {
	var out []line
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, line{i + 1, codeSpan.ReplaceAllString(l, "``")})
		}
	}
	return out
}

// anchors returns the fragment ids GitHub gives the headings of a Markdown
// file: lower case, punctuation other than '-' and '_' dropped, spaces as
// '-', a repeated id suffixed -1, -2, ...
func anchors(text string) map[string]bool {
	ids := make(map[string]bool)
	seen := make(map[string]int)
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		m := heading.FindStringSubmatch(l)
		if in || m == nil {
			continue
		}
		id := slug(m[2])
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func slug(title string) string {
	// Links in a heading count by their text.
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestLinksResolve(t *testing.T) {
	cache := make(map[string]map[string]bool)
	headingsOf := func(path string) (map[string]bool, error) {
		if ids, ok := cache[path]; ok {
			return ids, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range prose(string(b)) {
			n := l.n
			for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				info, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, n, target, dest)
					continue
				}
				if frag == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: a #fragment into %s, which is not a Markdown file", file, n, target, dest)
					continue
				}
				ids, err := headingsOf(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !ids[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with id %q", file, n, target, dest, frag)
				}
			}
		}
	}
}

func TestNoOutsideCitations(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			for _, s := range outside {
				if strings.Contains(l, s) {
					t.Errorf("%s:%d: cites %s, which is not in the repository", file, i+1, s)
				}
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Mode vhost: the app side over vhost-user":                                    "mode-vhost-the-app-side-over-vhost-user",
		"The app header, `ring/kbridge.h`":                                            "the-app-header-ringkbridgeh",
		"The reference app's `--vhost` port":                                          "the-reference-apps---vhost-port",
		"The vhost variant (`KBT_MODE=vhost`)":                                        "the-vhost-variant-kbt_modevhost",
		"Where /dev/vhost-net exists: DPDK's own kernel path (documented, not built)": "where-devvhost-net-exists-dpdks-own-kernel-path-documented-not-built",
		"`ena-wc` — ENA write-combining":                                              "ena-wc--ena-write-combining",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

// TestConfigKeysDocumented keeps CONFIG.md the reference of every key: each
// key kbridge reads has a row there, or, for the xdp section, in XDP.md's
// table, and no row names a key that does not exist.
func TestConfigKeysDocumented(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ref, xdpDoc := section(t, read("CONFIG.md"), "## Keys"), read("XDP.md")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)`")
	documented := make(map[string]bool)
	for _, m := range row.FindAllStringSubmatch(ref, -1) {
		documented[m[1]] = true
	}
	keys := config.Keys()
	for _, k := range keys {
		if sub, ok := strings.CutPrefix(k, "xdp."); ok {
			if !strings.Contains(xdpDoc, "| `"+sub+"` |") {
				t.Errorf("key %s has no row in XDP.md's configuration table", k)
			}
			continue
		}
		if !documented[k] {
			t.Errorf("key %s has no row in CONFIG.md", k)
		}
	}
	for k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("CONFIG.md documents %s, which is not a configuration key", k)
		}
	}
}

// section returns the part of a Markdown text from the heading title to the
// next heading of the same level.
func section(t *testing.T, text, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+title+"\n")
	if !ok {
		t.Fatalf("no section %q", title)
	}
	level := title[:strings.IndexByte(title, ' ')+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// maxBenchmarks bounds BENCHMARKS.md: a reference (how to run, the method,
// one committed run, the targets) fits in it; dated runs and experiments go
// to docs/runs/, where they do not crowd it out.
const maxBenchmarks = 30 << 10

var (
	issueNumber = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)
	machinePath = regexp.MustCompile(`(^|[^\w.])/(work|tmp)(/|\b)`)
)

// TestBenchmarksStaysAShortReference keeps BENCHMARKS.md a reference, not a
// lab notebook: under 30 KiB, no issue numbers (a reader of a clone has no
// tracker), no paths of one machine's checkouts or scratch files.
func TestBenchmarksStaysAShortReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= maxBenchmarks {
		t.Errorf("docs/BENCHMARKS.md is %d bytes, %d or more: move dated runs to docs/runs/", len(b), maxBenchmarks)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if m := issueNumber.FindString(l); m != "" {
			t.Errorf("docs/BENCHMARKS.md:%d: names %q; say what was measured instead", i+1, m)
		}
		if machinePath.MatchString(l) {
			t.Errorf("docs/BENCHMARKS.md:%d: a path under /work or /tmp: %s", i+1, l)
		}
	}
}

// TestEveryRunIsListed keeps docs/runs/README.md the index of the dated
// runs: every file there is linked from it.
func TestEveryRunIsListed(t *testing.T) {
	dir := filepath.Join(root, "docs", "runs")
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 2 {
		t.Fatalf("docs/runs holds %d Markdown files; want the index and at least one run", len(runs))
	}
	for _, run := range runs {
		name := filepath.Base(run)
		if name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name+")") && !strings.Contains(string(index), "]("+name+"#") {
			t.Errorf("docs/runs/%s is not listed in docs/runs/README.md", name)
		}
	}
}
